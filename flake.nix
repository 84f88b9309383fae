{
  # function-gateway-readiness: a dev shell, the function's package, its OCI
  # image, and a check that runs the test suite.
  #
  # Evaluated nowhere yet: the machines this was written on reach no Nix
  # binary cache or GitHub. `make test` checks that this file parses
  # (`nix-instantiate --parse`). PyPI packages nixpkgs lacks are fetched by
  # hash; the hashes were computed from the files PyPI serves.
  description = "Crossplane function: Envoy AI Gateway inference gateways that tell the truth";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachSystem [ "x86_64-linux" "aarch64-linux" ] (system:
      let
        pkgs = nixpkgs.legacyPackages.${system};
        python = pkgs.python311;
        py = python.pkgs;

        crossplane-function-sdk-python = py.buildPythonPackage rec {
          pname = "crossplane_function_sdk_python";
          version = "0.15.1";
          format = "wheel";
          src = py.fetchPypi {
            inherit pname version format;
            dist = "py3";
            python = "py3";
            hash = "sha256-2INuXI+VzDJRNF4v2M071ZOA8TeB0VInZ2sFbYVa2HM=";
          };
          # The SDK pins exact grpcio and protobuf releases; nixpkgs moves on.
          nativeBuildInputs = [ py.pythonRelaxDepsHook ];
          pythonRelaxDeps = true;
          propagatedBuildInputs = with py; [ click grpcio grpcio-reflection protobuf pydantic structlog ];
        };

        cel-python = py.buildPythonPackage rec {
          pname = "cel_python";
          version = "0.5.0";
          format = "wheel";
          src = py.fetchPypi {
            inherit pname version format;
            dist = "py3";
            python = "py3";
            hash = "sha256-0PhQCLiWVcK7GNeX0vo/lvLtgPSjtDsOgTjGZGWB5fY=";
          };
          nativeBuildInputs = [ py.pythonRelaxDepsHook ];
          pythonRelaxDeps = true;
          propagatedBuildInputs = with py; [ google-re2 jmespath lark pendulum pyyaml ];
        };

        # Google's C++ CEL, shipped only as manylinux wheels.
        cel-expr-python = py.buildPythonPackage rec {
          pname = "cel_expr_python";
          version = "0.1.3";
          format = "wheel";
          src = py.fetchPypi {
            inherit pname version format;
            dist = "cp311";
            python = "cp311";
            abi = "cp311";
            platform = "manylinux_2_27_x86_64.manylinux_2_28_x86_64";
            hash = "sha256-KSrlBXJ7/PwZhsi/ZTwlgPqgb0avVrkIcGDq/fKghlI=";
          };
          nativeBuildInputs = [ pkgs.autoPatchelfHook ];
          buildInputs = [ pkgs.stdenv.cc.cc.lib ];
          propagatedBuildInputs = [ py.protobuf ];
        };

        testDeps = with py; [
          pytest
          hypothesis
          jsonschema
          cryptography
          cel-python
          cel-expr-python
        ];

        function = py.buildPythonApplication {
          pname = "function-gateway-readiness";
          version = "0.1.0";
          pyproject = true;
          src = ./.;
          build-system = [ py.hatchling ];
          dependencies = [ crossplane-function-sdk-python py.click py.pydantic py.pyyaml ];
          nativeCheckInputs = testDeps;
          # The schema tests need the upstream CRDs, which live outside the flake.
          checkPhase = ''
            runHook preCheck
            python -m pytest -q tests --ignore=tests/test_schemas.py
            runHook postCheck
          '';
        };
      in
      {
        packages = {
          default = function;
          inherit function;
          image = pkgs.dockerTools.buildLayeredImage {
            name = "function-gateway-readiness";
            tag = "v0.1.0";
            contents = [ function ];
            config = {
              Entrypoint = [ "${function}/bin/function" ];
              ExposedPorts."9443/tcp" = { };
              User = "65532:65532";
            };
          };
        };

        checks.tests = function;

        devShells.default = pkgs.mkShell {
          packages = [ python pkgs.gnumake pkgs.ruff pkgs.shellcheck pkgs.kind pkgs.kubectl ];
          shellHook = ''
            echo "make test  # creates .venv and runs the suite"
          '';
        };
      });
}
