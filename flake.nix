{
  description = "symmem: symmetric GPU memory toolkit (Rust workspace, cargo xtask, ROCm shell)";

  # Every input is pinned to a full commit in its URL, so the flake.lock that the first
  # `nix develop` writes resolves to the same trees everywhere (README, "Nix").
  # - nixpkgs: a master commit whose rocmPackages is the ROCm that pins.toml [nix] rocm names
  #   (the rocm shell refuses another).
  # - rust-overlay: a commit that has the stable toolchain pins.toml [rust] names.
  # - crane: tag v0.24.0 (needs Nix >= 2.31).
  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/41e7b6084c65dd58fcadf3cf0531f7b1936af067";
    rust-overlay = {
      url = "github:oxalica/rust-overlay/62e3b8aedabc240e5b0cc9fae003bc9edfebbc9b";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    crane.url = "github:ipetkov/crane/692f7e9ef2ece8125b466f66f2af532b3edaed0d";
  };

  outputs =
    {
      nixpkgs,
      rust-overlay,
      crane,
      ...
    }:
    let
      inherit (nixpkgs) lib;

      # pins.toml and rust-toolchain.toml, read and guarded in plain builtins (nix/pins.nix), so
      # that CI evaluates this part for real without nixpkgs. No pinned value is repeated here.
      symmem = import ./nix/pins.nix { };
      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);

      perSystem = lib.genAttrs symmem.systems (
        system:
        let
          pkgs = import nixpkgs {
            inherit system;
            overlays = [ rust-overlay.overlays.default ];
          };

          # The toolchain rust-toolchain.toml asks for (its profile and components) at the
          # version pinned in pins.toml; `extra` adds components for the dev shells only.
          rustToolchainFor =
            p: extra:
            p.rust-bin.stable.${symmem.rust.version}.${symmem.rust.profile}.override {
              extensions = symmem.rust.components ++ extra;
            };
          craneLib = (crane.mkLib pkgs).overrideToolchain (p: rustToolchainFor p [ ]);

          # The whole checkout minus what cannot matter to cargo, so that tests which read
          # pins.toml, rust-toolchain.toml, insta snapshots and xtask/tests/fixtures (and files
          # other crates add later) find them. In a flake this is the git-tracked tree.
          src = lib.fileset.toSource {
            root = ./.;
            fileset = lib.fileset.difference ./. (
              lib.fileset.unions (
                map lib.fileset.maybeMissing [
                  ./flake.nix
                  ./flake.lock
                  ./target
                  ./.device
                ]
              )
            );
          };

          commonArgs = {
            inherit src;
            # The root Cargo.toml is a virtual manifest: name the derivations explicitly.
            pname = "symmem";
            version = cargoToml.workspace.package.version;
            strictDeps = true;
            # pyo3's build script (crates/symmem-py) asks a Python interpreter for its config.
            nativeBuildInputs = [ pkgs.python3 ];
          };

          # Checks build like CI (.ci/run): dev profile, whole workspace, Cargo.lock as committed.
          devArgs = commonArgs // {
            CARGO_PROFILE = "dev";
            cargoExtraArgs = "--locked --workspace";
          };
          devArtifacts = craneLib.buildDepsOnly devArgs;

          # The build-rocshmem end-to-end test needs git, cmake, ninja and c++ (stdenv's). Their
          # setup hooks must not take over crane's phases.
          # `cargo xtask codegen --check` (run by xtask's tests) needs libclang for the shim's
          # bindings: bindgenHook exports LIBCLANG_PATH and BINDGEN_EXTRA_CLANG_ARGS (with
          # CI=true a missing libclang fails it, by design).
          testTools = {
            nativeBuildInputs = [
              pkgs.git
              pkgs.cmake
              pkgs.ninja
              pkgs.rustPlatform.bindgenHook
              pkgs.python3 # replaces commonArgs' list in `devArgs // testTools`
            ];
            dontUseCmakeConfigure = true;
            dontUseNinjaBuild = true;
            dontUseNinjaCheck = true;
            dontUseNinjaInstall = true;
          };

          # The product: symmem-matrix (the conformance matrix and the GPU bench) with the
          # programs it runs beside it in bin/: the rank binary symmem-conformance, the bench
          # binary symmem-gpu-bench and the launcher symmem-run. It needs no checkout.
          matrixArgs = commonArgs // {
            pname = "symmem-matrix";
            cargoExtraArgs = "--locked --package symmem-matrix --package symmem-conformance --package symmem-gpu --package symmem-launch --bins";
          };
          symmemMatrix = craneLib.buildPackage (
            matrixArgs
            // {
              cargoArtifacts = craneLib.buildDepsOnly matrixArgs;
              doCheck = false; # checks.tests runs every test of the workspace
              meta = {
                description = "symmem's conformance matrix and GPU bench (symmem-matrix), with the rank binary and symmem-run";
                mainProgram = "symmem-matrix";
                license = with lib.licenses; [
                  mit
                  asl20
                ];
              };
            }
          );

          xtaskArgs = commonArgs // {
            pname = "symmem-xtask";
            cargoExtraArgs = "--locked --package xtask";
          };
          # The developers' task runner (pinned rocSHMEM builds, the shim, codegen, images). It
          # locates pins.toml and target/ from the path it was compiled at, so outside a
          # checkout pass `--pins` and `--out-dir` (README, "Nix").
          xtask = craneLib.buildPackage (
            xtaskArgs
            // {
              cargoArtifacts = craneLib.buildDepsOnly xtaskArgs;
              doCheck = false; # checks.tests runs every test of the workspace
              meta = {
                description = "symmem's cargo xtask: pinned rocSHMEM and shim builds, codegen, images";
                mainProgram = "xtask";
                license = with lib.licenses; [
                  mit
                  asl20
                ];
              };
            }
          );

          checks = {
            inherit xtask;
            symmem-matrix = symmemMatrix;

            fmt = craneLib.cargoFmt {
              inherit (commonArgs) src pname version;
              cargoExtraArgs = "--all";
            };

            clippy = craneLib.cargoClippy (
              devArgs
              // {
                cargoArtifacts = devArtifacts;
                cargoClippyExtraArgs = "--all-targets -- -D warnings";
              }
            );

            tests = craneLib.cargoTest (
              devArgs
              // testTools
              // {
                cargoArtifacts = devArtifacts;
                # As in CI: a missing tool fails the end-to-end test instead of skipping it,
                # and insta fails on a snapshot mismatch instead of writing .snap.new files.
                CI = "true";
              }
            );

            # The main job of README / .ci/run: the conformance matrix on the host provider.
            conformance = craneLib.mkCargoDerivation (
              devArgs
              // {
                pnameSuffix = "-conformance";
                cargoArtifacts = devArtifacts;
                buildPhaseCargoCommand = "cargo xtask test --ranks 1,2,4,8";
                doInstallCargoArtifacts = false;
              }
            );
          };

          defaultShell = pkgs.mkShell {
            packages = [
              (rustToolchainFor pkgs [
                "rust-src"
                "rust-analyzer"
              ])
              pkgs.cmake
              pkgs.ninja
              pkgs.git
              pkgs.pkg-config
              # python3 runs the PyPI linters CI uses; nixpkgs also has the linters themselves.
              pkgs.python3
              pkgs.hadolint
              pkgs.actionlint
              pkgs.shellcheck
              pkgs.cargo-insta
              # libclang for bindgen: exports LIBCLANG_PATH and BINDGEN_EXTRA_CLANG_ARGS.
              pkgs.rustPlatform.bindgenHook
            ];
          };

          rocm = pkgs.rocmPackages;
          # What pins.toml says the Nix shell provides; evaluation stops if nixpkgs differs.
          rocmVersion = symmem.checkNixRocm rocm.rocm-core.version;

          # Directories whose tools make up ${ROCM_PATH}/llvm/bin, first match wins: clr's own
          # llvm/bin (its HIP clang: rocm-toolchain + LLVM bintools) first, then ROCm's LLVM.
          llvmBinDirs = [
            "${rocm.clr}/llvm/bin"
          ]
          ++ lib.optional (rocm.llvm ? rocm-toolchain) "${rocm.llvm.rocm-toolchain}/bin"
          ++ lib.optional (rocm.llvm ? llvm) "${lib.getBin rocm.llvm.llvm}/bin";

          # ROCM_PATH for `cargo xtask build-rocshmem`: nixpkgs removed rocmPackages.rocmPath,
          # so compose one. rocSHMEM's CMake does find_package(hip), find_package(hsa-runtime64)
          # and find_package(ROCmCMakeBuildTools) under -DCMAKE_PREFIX_PATH=<this>, reads
          # .info/version (else xtask passes EXPLICIT_ROCM_VERSION from
          # include/rocm-core/rocm_version.h), and calls clang++, llvm-link and opt from
          # ${ROCM_PATH}/llvm/bin for its device bitcode. clr goes first: its bin/hipcc is the
          # wrapper that sets HIP_PATH, HIP_CLANG_PATH and the device-library path.
          # UNVERIFIED (no nixpkgs here): attribute names and output layouts are those of the
          # nixpkgs rocm-modules recipes read from source; the build below fails with a message
          # naming the missing tool if llvm/bin lacks one.
          rocmPath = pkgs.symlinkJoin {
            name = "symmem-rocm-path-${rocmVersion}";
            paths = lib.concatMap (p: [ p ] ++ lib.optional (p ? dev) p.dev) (
              [
                rocm.clr
                rocm.hipcc
                rocm.rocm-core
                rocm.rocm-runtime
                rocm.rocm-cmake
                rocm.rocm-device-libs
                rocm.rocm-comgr
                rocm.rocminfo
              ]
              ++ lib.optional (rocm ? hip-common) rocm.hip-common
            );
            postBuild = ''
              ln -sfn ${rocm.clr}/bin/hipcc $out/bin/hipcc
              ln -sfn ${rocm.clr}/bin/hipconfig $out/bin/hipconfig

              # clr's llvm is a symlink; make llvm/bin a directory that has every tool.
              rm -rf "$out/llvm"
              mkdir -p "$out/llvm/bin"
              for dir in ${lib.escapeShellArgs llvmBinDirs}; do
                [ -d "$dir" ] || continue
                for tool in "$dir"/*; do
                  name=$(basename "$tool")
                  # -L too: a dangling link from an earlier dir still counts as taken.
                  if [ ! -e "$out/llvm/bin/$name" ] && [ ! -L "$out/llvm/bin/$name" ]; then
                    ln -s "$tool" "$out/llvm/bin/$name"
                  fi
                done
              done
              for tool in clang clang++ llvm-link opt; do
                if [ ! -x "$out/llvm/bin/$tool" ]; then
                  echo "symmem ROCm path: llvm/bin/$tool not found in: ${toString llvmBinDirs}" >&2
                  exit 1
                fi
              done
              # ROCm >= 6 installs also have lib/llvm.
              # (-f: a dangling link there is replaced, an existing directory kept.)
              [ -e "$out/lib/llvm" ] || ln -sfn ../llvm "$out/lib/llvm"

              if [ ! -e "$out/.info/version" ]; then
                rm -rf "$out/.info"
                if [ -e ${rocm.rocm-core}/.info/version ]; then
                  ln -s ${rocm.rocm-core}/.info "$out/.info"
                else
                  echo "symmem ROCm path: no .info/version; xtask will pass EXPLICIT_ROCM_VERSION" >&2
                fi
              fi

              # Setup hooks come from the packages in the shell, not from this tree.
              rm -rf "$out/nix-support"
            '';
          };

          rocmShell = pkgs.mkShell {
            inputsFrom = [ defaultShell ];
            # clr's setup hook exports HIP_PATH, HIP_PLATFORM, HIP_DEVICE_LIB_PATH,
            # HIP_CLANG_PATH; rocm-core's exports ROCM_VERSION.
            packages = [
              rocmPath
              rocm.clr
              rocm.rocm-core
              rocm.rocminfo
            ];
            shellHook = ''
              export ROCM_PATH=${rocmPath}
              export HIPCC=${rocmPath}/bin/hipcc
              export CMAKE_PREFIX_PATH="${rocmPath}''${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
              echo "symmem ROCm shell: ROCm ${rocmVersion}, ROCM_PATH=$ROCM_PATH"
              echo "rocSHMEM pin (pins.toml): ${symmem.rocshmem.version} at ${builtins.substring 0 12 symmem.rocshmem.commit} of ${symmem.rocshmem.repository} (${symmem.rocshmem.subdirectory})"
              echo "build it: cargo xtask build-rocshmem --arch ${symmem.arch}"
            '';
          };

          hasRocm = symmem.hasRocm system;
        in
        {
          packages = {
            default = symmemMatrix;
            symmem-matrix = symmemMatrix;
            inherit xtask;
          }
          // lib.optionalAttrs hasRocm { rocm-path = rocmPath; };

          inherit checks;

          # No devShells.cuda: see README ("Nix") for why and what it would take.
          devShells = {
            default = defaultShell;
          }
          // lib.optionalAttrs hasRocm { rocm = rocmShell; };

          formatter = pkgs.nixfmt-tree or pkgs.nixfmt;
        }
      );
      # The output names nix/pins.nix declares (and CI evaluates) are exactly what is built here.
      names = attrs: builtins.sort builtins.lessThan (builtins.attrNames attrs);
      checkedOutputs = lib.mapAttrs (
        system: s:
        let
          want = symmem.outputNames.${system};
          sorted = builtins.sort builtins.lessThan;
          same = kind: names s.${kind} == sorted want.${kind};
        in
        if same "packages" && same "devShells" && same "checks" then
          s
        else
          throw "flake.nix outputs for ${system} differ from nix/pins.nix outputNames: update one of them"
      ) perSystem;
    in
    {
      packages = lib.mapAttrs (_: s: s.packages) checkedOutputs;
      checks = lib.mapAttrs (_: s: s.checks) checkedOutputs;
      devShells = lib.mapAttrs (_: s: s.devShells) checkedOutputs;
      formatter = lib.mapAttrs (_: s: s.formatter) checkedOutputs;
    };
}
