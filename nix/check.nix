# What `.ci/nix-check` evaluates strictly: every part of the flake that needs no package set.
# Evaluation stops with a message naming the fix at the first problem; on success the result is
# a summary of what was checked.
{
  root ? ../.,
}:
let
  flakeText = builtins.readFile (root + "/flake.nix");
  flake = import (root + "/flake.nix");
  symmem = import ./pins.nix {
    pinsFile = root + "/pins.toml";
    toolchainFile = root + "/rust-toolchain.toml";
  };
  pins = builtins.fromTOML (builtins.readFile (root + "/pins.toml"));

  contains = needle: haystack: builtins.replaceStrings [ needle ] [ "" ] haystack != haystack;
  fail = message: throw "nix-check: ${message}";

  # Inputs: each pinned to a full commit in its URL (or `follows` another input).
  commitUrl = url: builtins.match "(github|gitlab|sourcehut):[^/?#]+/[^/?#]+/[0-9a-f]{40}([?].*)?" url != null;
  revParam = url: builtins.match ".*[?&]rev=[0-9a-f]{40}(&.*)?" url != null;
  inputs = flake.inputs or { };
  unpinned = builtins.filter (
    name:
    let
      input = inputs.${name};
      url = if builtins.isAttrs input then input.url or null else input;
    in
    url != null && !(commitUrl url || revParam url)
  ) (builtins.attrNames inputs);

  # Every string pin of pins.toml (5 characters or more), as "table.field" = value.
  leaves = builtins.concatMap (
    table:
    builtins.concatMap (
      field:
      let
        value = pins.${table}.${field};
      in
      if builtins.isString value && builtins.stringLength value >= 5 then
        [ { name = "${table}.${field}"; inherit value; } ]
      else
        [ ]
    ) (builtins.attrNames pins.${table})
  ) (builtins.attrNames pins);
  repeated = builtins.filter (leaf: contains leaf.value flakeText) leaves;
in
if inputs == { } then
  fail "flake.nix declares no inputs"
else if unpinned != [ ] then
  fail "flake inputs not pinned by commit: ${builtins.concatStringsSep ", " unpinned} (use owner/repo/<40-hex commit>, or ?rev=<40-hex commit>)"
else if !(contains "import ./nix/pins.nix" flakeText) || contains "readFile ./pins.toml" flakeText then
  fail "flake.nix must read pins.toml only through `import ./nix/pins.nix`, which this check evaluates"
else if repeated != [ ] then
  fail "flake.nix repeats pinned values as literals: ${builtins.concatStringsSep ", " (map (l: "${l.value} (pins.${l.name})") repeated)}; read them from nix/pins.nix instead"
else
  # deepSeq: every value the flake can read from nix/pins.nix, guards included.
  builtins.deepSeq symmem {
    inputs = builtins.attrNames inputs;
    rust = symmem.rust.version;
    rocshmem = "${symmem.rocshmem.version} at ${symmem.rocshmem.commit}";
    rocm = symmem.rocm;
    outputs = symmem.outputNames;
  }
