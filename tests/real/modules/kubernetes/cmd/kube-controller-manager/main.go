// Command kube-controller-manager runs Kubernetes' controllers (Deployments,
// ReplicaSets, garbage collection), built from the pinned k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
