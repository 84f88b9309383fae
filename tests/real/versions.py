"""Every upstream component the real-component checks build, pinned in one place.

Each is built from the Go module proxy through a wrapper module under
`tests/real/modules/<name>/` whose go.sum fixes every dependency, so a build
is the same on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    name: str  # the wrapper module's folder under tests/real/modules/
    module: str
    version: str
    # binary name -> Go package path
    binaries: dict[str, str]


# v2.2.x is the last line whose CLI renders in-process (v2.3+ hands rendering
# to a core binary); cmd/crossplane in the same module is Crossplane core.
CROSSPLANE = Component(
    name="crossplane",
    module="github.com/crossplane/crossplane/v2",
    version="v2.2.1",
    binaries={
        "crank": "github.com/crossplane/crossplane/v2/cmd/crank",
        "crossplane": "github.com/crossplane/crossplane/v2/cmd/crossplane",
    },
)
