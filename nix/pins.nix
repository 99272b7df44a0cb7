# Everything the flake takes from pins.toml and rust-toolchain.toml, with its guards, in plain
# builtins: no nixpkgs needed, so `.ci/nix-check` evaluates this for real
# (`nix-instantiate --eval --strict`), guards and their messages included. flake.nix reads
# pins.toml only through this file.
{
  pinsFile ? ../pins.toml,
  toolchainFile ? ../rust-toolchain.toml,
}:
let
  pins = builtins.fromTOML (builtins.readFile pinsFile);
  toolchain = (builtins.fromTOML (builtins.readFile toolchainFile)).toolchain;

  # `value`, or evaluation stops with `message` (and how to fix it).
  guard =
    ok: message: value:
    if ok then value else throw "symmem (nix/pins.nix): ${message}";

  # "7.2.4" -> "7.2"
  series = version: builtins.concatStringsSep "." (builtins.genList (builtins.elemAt (builtins.splitVersion version)) 2);

  systems = [
    "x86_64-linux"
    "aarch64-linux"
  ];
  # nixpkgs builds rocmPackages for x86_64-linux only.
  rocmSystems = [ "x86_64-linux" ];
  hasRocm = system: builtins.elem system rocmSystems;
in
{
  rust = {
    version =
      guard (pins.rust.toolchain == toolchain.channel)
        "pins.toml [rust] toolchain = \"${pins.rust.toolchain}\" but rust-toolchain.toml channel = \"${toolchain.channel}\": make them equal"
        pins.rust.toolchain;
    profile = toolchain.profile or "minimal";
    components = toolchain.components or [ ];
  };

  rocshmem = {
    inherit (pins.rocshmem) repository subdirectory version;
    commit =
      guard (builtins.match "[0-9a-f]{40}" pins.rocshmem.commit != null)
        "pins.toml [rocshmem] commit = \"${pins.rocshmem.commit}\" is not a full 40-hex commit: pin a commit, never a branch or tag"
        pins.rocshmem.commit;
  };

  # The GPU target the rocm shell suggests (the images' default).
  inherit (pins.images) arch;

  # The ROCm each environment provides. They may differ in the patch release only (AMD's images
  # and nixpkgs release on their own schedules); the series is one for the whole toolkit.
  rocm = {
    images = pins.images.rocm;
    nix =
      guard (series pins.nix.rocm == series pins.images.rocm)
        "pins.toml [nix] rocm = \"${pins.nix.rocm}\" and [images] rocm = \"${pins.images.rocm}\" are different ROCm series: the Nix shell and the images must provide the same series"
        pins.nix.rocm;
  };

  # The rocm shell's guard: nixpkgs at the flake's pin must package the ROCm that pins.toml says
  # the Nix shell provides.
  checkNixRocm =
    provided:
    guard (provided == pins.nix.rocm)
      "nixpkgs at the flake's pin packages ROCm ${provided}, but pins.toml [nix] rocm = \"${pins.nix.rocm}\": set it to what the pin provides, or move the nixpkgs input to a commit that packages ${pins.nix.rocm}"
      provided;

  inherit systems rocmSystems hasRocm;

  # The flake's per-system output names (flake.nix asserts that its outputs have exactly these).
  outputNames = builtins.listToAttrs (
    map (system: {
      name = system;
      value = {
        packages = [
          "default"
          "symmem-matrix"
          "xtask"
        ]
        ++ (if hasRocm system then [ "rocm-path" ] else [ ]);
        devShells = [ "default" ] ++ (if hasRocm system then [ "rocm" ] else [ ]);
        checks = [
          "clippy"
          "conformance"
          "fmt"
          "symmem-matrix"
          "tests"
          "xtask"
        ];
      };
    }) systems
  );
}
