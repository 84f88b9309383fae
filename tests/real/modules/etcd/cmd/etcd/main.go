// Command etcd is etcd's server, built from the pinned go.etcd.io/etcd/server/v3
// module (its own main lives in a module with local replace lines).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
