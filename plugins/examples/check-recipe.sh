#!/usr/bin/env bash
# Runs a language's "From an empty folder" recipe as its README writes it, in an empty folder,
# then the component it built through `mimeo plugin test` on one of the shared fixtures (one with
# inputs, so it shows the component implements mimeo:transform@0.2.0 and sees them).
#
#   ./check-recipe.sh javascript [MIMEO]   # MIMEO: the mimeo binary (default: mimeo on PATH)
#
# The first ```sh block under "## From an empty folder" is the recipe; /path/to/mimeo in it
# stands for this repository. Needs what the recipe needs (for JavaScript: node, npm and the npm
# registry). Exits non-zero when a step fails or the fixture does not pass.
set -euo pipefail

lang="${1:?usage: check-recipe.sh LANG [MIMEO]}"
mimeo="${2:-mimeo}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
readme="$here/$lang/README.md"

recipe="$(awk '
    /^## From an empty folder/ { section = 1; next }
    section && /^## / { exit }
    section && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }
' "$readme")"
if [[ -z "$recipe" ]]; then
    echo "no sh block under \"## From an empty folder\" in $readme" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "[recipe] $lang, in $work:" >&2
echo "${recipe//\/path\/to\/mimeo/$repo}" >"$work/recipe.sh"
sed 's/^/[recipe]   /' "$work/recipe.sh" >&2
(cd "$work" && bash -euo pipefail recipe.sh >&2)

built="$(find "$work" -name "add-annotation-$lang.wasm" -not -path '*/node_modules/*' | head -1)"
if [[ -z "$built" ]]; then
    echo "[recipe] the recipe built no add-annotation-$lang.wasm" >&2
    exit 1
fi
case="$here/$lang/fixtures/inputs-joined"
inputs=()
for file in $(LC_ALL=C ls "$case/inputs"); do # file-name order, as the fixtures define it
    inputs+=(--input "${file%.yaml}=$case/inputs/$file")
done
"$mimeo" plugin test "$built" -f "$case/object.yaml" --config "@$case/config.json" \
    --context "$case/context.json" "${inputs[@]}" -o json >"$work/got.json"
# The fixture's expectation, in the one field it is about (expected.yaml holds the whole object).
python3 - "$work/got.json" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))
want = "ca-bundle,issuer,registry -> tenant-a [ca-bundle,issuer,registry]"
value = got.get("metadata", {}).get("annotations", {}).get("example.com/made-from")
if value != want:
    sys.exit(f"[recipe] the annotation is {value!r}, not {want!r}")
PY
echo "[recipe] $lang: the recipe's component passes $(basename "$case")" >&2
