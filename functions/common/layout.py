"""Whether an engine's parallel layout uses the accelerators its replica claims.

A user who writes part of a layout (only `--pipeline-parallel-size 2` on a pod holding
8 GPUs) gets an engine that starts on 2 GPUs and leaves 6 claimed and idle: the engines
fill every size not given with 1, and nothing says so. compose-model-replica completes
such a layout where one size is missing and the rest divide the claim (it adds the
missing size and says so in a warning); where it cannot tell what was meant it warns,
naming the sizes and the counts; and a layout that asks for more accelerators than the
replica claims cannot start, so both compose-model-deployment (before placing) and
compose-model-replica (for one written directly) refuse it. Both read it here, so they
cannot disagree.

The size completed is the one each engine's own default fills: the tensor-parallel size
(vLLM within a node, SGLang across all of them), else, for a multi-node vLLM replica,
the pipeline-parallel size (vLLM's layout across nodes). A data-parallel size is never
invented: it changes how many copies of the model run, not how one is spread.

Accelerators only, as everywhere: a NIC beside the GPUs is no rank, and a CPU member
(no accelerators) is not checked. Sizes written as `$(VAR)` or other text cannot be
counted here and are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Every spelling each engine accepts for a size (vLLM 0.32.0, SGLang 0.5.23), the
# canonical one first. The user's spelling wins under any of them.
TENSOR: Final = "tensor"
PIPELINE: Final = "pipeline"
DATA: Final = "data"
SPELLINGS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "vllm": {
        TENSOR: ("--tensor-parallel-size", "-tp"),
        PIPELINE: ("--pipeline-parallel-size", "-pp"),
        DATA: ("--data-parallel-size", "-dp"),
    },
    "sglang": {
        TENSOR: ("--tp-size", "--tp", "--tensor-parallel-size"),
        PIPELINE: ("--pp-size", "--pipeline-parallel-size"),
        DATA: ("--dp-size", "--dp", "--data-parallel-size"),
    },
}
# SGLang's data-parallel attention splits the tensor-parallel group instead of
# multiplying it.
SGLANG_DP_ATTENTION: Final = "--enable-dp-attention"


@dataclass(frozen=True)
class Written:
    """One size as the user wrote it: the flag's spelling and its value."""

    dimension: str
    flag: str
    size: int


@dataclass(frozen=True)
class Fit:
    """How a written layout fits the accelerators one replica of the engine claims."""

    written: tuple[Written, ...]
    used: int  # accelerators the written sizes take
    claimed: int  # accelerators one replica holds (per pod x pods)
    per_pod: int
    pods: int
    added: tuple[str, ...] = ()  # the flag and value completing it, if one does

    @property
    def too_large(self) -> bool:
        return self.used > self.claimed

    @property
    def unused(self) -> int:
        return 0 if self.added else max(0, self.claimed - self.used)

    def sizes(self) -> str:
        """`--pipeline-parallel-size 2` (and the others written), as the user wrote them."""
        return ", ".join(f"{w.flag} {w.size}" for w in self.written)

    def refusal(self) -> str:
        """Why a layout larger than the claim cannot start (both functions refuse it)."""
        return (
            f"the parallel layout written ({self.sizes()}) needs {self.used} accelerators, "
            f"but one replica claims {self.claim()}: the engine cannot start; lower the "
            "sizes or claim more accelerators"
        )

    def breakdown(self) -> str:
        pods = "pod" if self.pods == 1 else "pods"
        return f"({self.per_pod} per pod x {self.pods} {pods})"

    def claim(self) -> str:
        return f"{self.claimed} {self.breakdown()}"


def flag_value(args: list[str], spellings: tuple[str, ...]) -> tuple[str, str] | None:
    """(spelling, value) of the last occurrence of a flag (argparse keeps the last)."""
    found = None
    for i, arg in enumerate(args):
        for spelling in spellings:
            if arg == spelling and i + 1 < len(args):
                found = (spelling, args[i + 1])
            elif arg.startswith(spelling + "="):
                found = (spelling, arg.split("=", 1)[1])
    return found


def written_sizes(engine_type: str, args: list[str]) -> tuple[Written, ...] | None:
    """The sizes the args set, in tensor, pipeline, data order; None when one of them is
    not a whole number here (a `$(VAR)`, a typo): it cannot be counted."""
    written = []
    for dimension, spellings in SPELLINGS.get(engine_type, {}).items():
        found = flag_value(args, spellings)
        if found is None:
            continue
        spelling, text = found
        # ASCII digits only, and few: `int` refuses other digits and very long numbers.
        if not (text.isascii() and text.isdigit() and len(text) <= 6) or int(text) < 1:
            return None
        written.append(Written(dimension, spelling, int(text)))
    return tuple(written)


def fit(
    engine_type: str, args: list[str], *, per_pod: int, pods: int = 1, multinode: bool = False
) -> Fit | None:
    """How the args' layout fits `per_pod` accelerators on each of `pods` pods; None when
    there is nothing to say: no size written (the default layout is ours), a size that
    cannot be counted, no accelerators (a CPU member), or an engine we do not know."""
    if engine_type not in SPELLINGS or per_pod < 1 or pods < 1:
        return None
    written = written_sizes(engine_type, args)
    if not written:
        return None
    by_dimension = {w.dimension: w.size for w in written}
    data = by_dimension.get(DATA, 1)
    if engine_type == "sglang" and SGLANG_DP_ATTENTION in args:
        data = 1
    used = by_dimension.get(TENSOR, 1) * by_dimension.get(PIPELINE, 1) * data
    claimed = per_pod * pods
    result = Fit(written, used, claimed, per_pod, pods)
    if used >= claimed or claimed % used:
        return result
    missing = None
    if TENSOR not in by_dimension:
        missing = TENSOR
    elif engine_type == "vllm" and multinode and PIPELINE not in by_dimension:
        missing = PIPELINE
    if missing is None:
        return result
    flag = SPELLINGS[engine_type][missing][0]
    return Fit(written, used, claimed, per_pod, pods, (flag, str(claimed // used)))
