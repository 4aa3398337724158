"""The fast call (chord_kernels.jit.fast_call, csrc/launcher/fast_call.cpp) on CPU: built with the
real C++ compiler against this torch, launching through a hook instead of the driver. A call it
knows launches the bytes the Python path launched for the same arguments; anything else goes to
the Python path, which records its launch."""

import subprocess
import sys
import warnings

import pytest
import torch
from chord_kernels import env, layouts, ops
from chord_kernels.jit import fast_call
from test_ops_host import _grouped_problem, _problem

pytestmark = pytest.mark.slow  # the first test in a fresh cache builds the module (~15 s on 2 cores)


class StubKernel:
    """A loaded kernel's handles and the Python path's launches."""

    def __init__(self, fn, launches):
        self.fn, self.ctx, self.launches = fn, 900 + fn, launches

    def launch(self, grid, block, smem, stream, params):
        self.launches.append(("python", self.fn, self.ctx, grid, block, smem, stream, params))


@pytest.fixture(scope="module")
def module_path(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHORD_CACHE_DIR", str(tmp_path_factory.mktemp("fast_call_cache")))
        return fast_call.module_path()


@pytest.fixture
def hooked(stub_device, monkeypatch, module_path):
    """The fast call configured with a launch hook (the driver's place) and stream 77; kernels
    stubbed, each with its own handles; the Python path's and the fast call's launches in one
    list, in order."""
    launches = []
    kernels = {}

    def load(launch, device):
        stub_device.append(launch.spec)
        return kernels.setdefault(launch.spec, StubKernel(len(kernels) + 1, launches))

    monkeypatch.setattr(ops, "_load", load)
    monkeypatch.setattr(ops, "_current_stream", lambda index: 77)
    monkeypatch.setattr(fast_call, "module_path", lambda: module_path)
    module = fast_call.load(launch_hook=lambda *args: launches.append(("fast", *args)), stream_of=lambda device: 77)
    monkeypatch.setattr(ops, "_fast_call", module.call)
    ops._indexed_plans.clear()
    ops._grouped_plans.clear()
    yield {"launches": launches, "module": module}
    ops._unbind_fast_call()
    ops._indexed_plans.clear()
    ops._grouped_plans.clear()


def _same_launch(python, fast):
    """A fast-call launch carries exactly the Python path's (handles, grid, block, smem, stream, bytes)."""
    assert python[0] == "python" and fast[0] == "fast"
    assert tuple(python[1:]) == tuple(fast[1:])


def test_indexed_known_calls_launch_the_python_paths_bytes(hooked):
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    launches = hooked["launches"]
    for _ in range(3):
        ops._indexed_launch(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    assert [x[0] for x in launches] == ["python", "fast", "fast"]
    _same_launch(launches[0], launches[1])
    # New tensors of the same signature (vLLM's fresh views each step): launched from C++ with
    # their own pointers, the same bytes as the Python path packs for them.
    a2, out2, ids2 = a.clone(), out.clone(), sorted_ids.clone()
    ops._indexed_launch(a2, packed, ids2, expert_ids, ntp, 2, 8, out2)
    assert launches[-1][0] == "fast"
    hooked["module"].forget()
    ops._indexed_launch(a2, packed, ids2, expert_ids, ntp, 2, 8, out2)
    _same_launch(launches[-1], launches[-2])
    assert hooked["module"].plan_count() == 1


@pytest.mark.parametrize("change", ["rows", "top_k", "block_m", "stride", "dtype", "env", "tuning"])
def test_indexed_another_signature_takes_the_python_path(hooked, monkeypatch, change):
    """Anything the Python path keys its plans on (and more) is part of the fast call's
    signature: a call that differs in it is planned (and checked) by the Python path again."""
    a, packed, sorted_ids, expert_ids, ntp, out = _problem(tokens=4)
    launches = hooked["launches"]
    ops._indexed_launch(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    ops._indexed_launch(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    assert [x[0] for x in launches] == ["python", "fast"]
    args = dict(a=a, top_k=2, block_m=8, out=out)
    if change == "rows":
        args["a"] = a[:2]
    elif change == "top_k":
        args["top_k"] = 1
    elif change == "block_m":
        args["block_m"] = 16  # blocks of 16 rows hold the 8-row routing too
    elif change == "stride":  # the same shape, rows 2K apart
        args["a"] = torch.randn(4, 2 * a.shape[1]).to(torch.bfloat16)[:, :a.shape[1]]
    elif change == "dtype":  # the Python path refuses it
        args["a"] = a.float()
    elif change == "env":
        monkeypatch.setenv(env.INDEXED_KERNEL, "mma")
    else:
        monkeypatch.setenv(env.TUNING, "STAGES=2")
    if change == "dtype":
        with pytest.raises(ValueError, match="a must be bfloat16"):
            ops._indexed_launch(args["a"], packed, sorted_ids, expert_ids, ntp, args["top_k"], args["block_m"], out)
        assert len(launches) == 2
        return
    ops._indexed_launch(args["a"], packed, sorted_ids, expert_ids, ntp, args["top_k"], args["block_m"], args["out"])
    ops._indexed_launch(args["a"], packed, sorted_ids, expert_ids, ntp, args["top_k"], args["block_m"], args["out"])
    assert [x[0] for x in launches] == ["python", "fast", "python", "fast"]
    _same_launch(launches[2], launches[3])
    assert hooked["module"].plan_count() == 2


def test_indexed_tensor_maps_by_weight_address(hooked, monkeypatch):
    """With tensor maps in the parameters, a new weight address is the Python path's (its maps
    are encoded there), after which both weights launch from C++ with their own maps."""
    monkeypatch.setenv(env.INDEXED_KERNEL, "wgmma")
    a, packed, sorted_ids, expert_ids, ntp, out = _problem(n=512, block_m=64)
    other = layouts.pack_w4a16(*layouts.unpack_w4a16(packed), "indexed")
    launches = hooked["launches"]
    for weight in (packed, packed, other, other, packed, other):
        ops._indexed_launch(a, weight, sorted_ids, expert_ids, ntp, 2, 64, out)
    assert [x[0] for x in launches] == ["python", "fast", "python", "fast", "fast", "fast"]
    _same_launch(launches[0], launches[4])
    _same_launch(launches[2], launches[5])
    assert len(launches[1][-1]) == 448 and hooked["module"].plan_count() == 1


def test_indexed_misaligned_a_raises_on_the_python_path(hooked):
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    ops._indexed_launch(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    base = torch.zeros(a.numel() + 8, dtype=torch.bfloat16)
    shifted = base[1:1 + a.numel()].view(a.shape)
    with pytest.raises(ValueError, match="must start 16-byte aligned"):
        ops._indexed_launch(shifted, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    assert len(hooked["launches"]) == 1


GROUPED_CASES = {
    # (form, weight mode, problem kwargs, a's shape or None, route, expected_m)
    "contiguous": ("contiguous", "contiguous", {}, None, lambda: torch.zeros(24, dtype=torch.int32), 0),
    "offsets": ("contiguous_offsets", "contiguous", {}, None, lambda: torch.tensor([0, 5, 5, 12, 20]), 6),
    "offsets_no_hint": ("contiguous_offsets", "contiguous", {}, None, lambda: torch.tensor([0, 5, 5, 12, 20]), None),
    "masked": ("masked", "masked", {}, None, lambda: torch.tensor([3, 0, 6, 1], dtype=torch.int32), 6),
    "masked_3d": ("masked", "masked", {}, (4, 6, 256), lambda: torch.tensor([3, 0, 6, 1], dtype=torch.int32), 6),
    "tile_loop_maps": ("masked", "masked", dict(n=256, k=1024, rows=1024), (4, 256, 1024),
                       lambda: torch.tensor([200, 0, 256, 90], dtype=torch.int32), 140),
    "pair": ("contiguous_offsets", "contiguous", dict(e=3, n=256, k=1024, rows=3 * 683), None,
             lambda: torch.tensor([0, 683, 2 * 683, 3 * 683]), 683),
}


@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
def test_grouped_known_calls_launch_the_python_paths_bytes(hooked, case):
    form, mode, kwargs, shape3, route, hint = GROUPED_CASES[case]
    packed, a, out = _grouped_problem(mode, **kwargs)
    if shape3:
        a = a.view(shape3)
    route = route()
    launches = hooked["launches"]
    ops._grouped_launch(form, a, packed, route, out, hint)
    first = len(launches)
    assert first == (2 if case == "pair" else 1) and {x[0] for x in launches} == {"python"}
    ops._grouped_launch(form, a, packed, route, out, hint)
    assert [x[0] for x in launches[first:]] == ["fast"] * first
    for python, fast in zip(launches[:first], launches[first:], strict=True):
        _same_launch(python, fast)
    a2, out2 = a.clone(), out.clone()  # a new a: with maps, its own (the Python path encodes them)
    ops._grouped_launch(form, a2, packed, route, out2, hint)
    ops._grouped_launch(form, a2, packed, route, out2, hint)
    kinds = [x[0] for x in launches[2 * first:]]
    maps = case in ("tile_loop_maps", "pair")
    assert kinds == (["python"] * first + ["fast"] * first if maps else ["fast"] * 2 * first)
    assert hooked["module"].plan_count() == 1


def test_grouped_split_override_is_part_of_the_signature(hooked, monkeypatch):
    """CHORD_GROUPED_SPLIT_K is the grouped plans' one override: set, the call is planned again
    (here refused: the tile cannot split, so the Python path raises and nothing launches)."""
    packed, a, out = _grouped_problem("contiguous")
    offsets = torch.tensor([0, 5, 5, 12, 20])
    for _ in range(2):
        ops._grouped_launch("contiguous_offsets", a, packed, offsets, out, 6)
    monkeypatch.setenv(env.GROUPED_SPLIT_K, "2")
    with pytest.raises(ValueError, match="CHORD_GROUPED_SPLIT_K"):
        ops._grouped_launch("contiguous_offsets", a, packed, offsets, out, 6)
    assert [x[0] for x in hooked["launches"]] == ["python", "fast"]


def test_masked_flat_copy_stays_on_the_python_path(hooked):
    """A 3-D masked input that is no view of [G*max_m, K] is copied flat on every call by the
    Python path; the fast call never records it."""
    packed, a, out = _grouped_problem("masked")
    a3 = a.view(4, 6, 256).transpose(0, 1).contiguous().transpose(0, 1)  # [4, 6, 256], not flat
    counts = torch.tensor([3, 0, 6, 1], dtype=torch.int32)
    for _ in range(2):
        ops._grouped_launch("masked", a3, packed, counts, out, 6)
    assert [x[0] for x in hooked["launches"]] == ["python", "python"] and hooked["module"].plan_count() == 0


def test_remember_refuses_parameters_that_are_not_this_calls(hooked):
    """The recorded launch must start with the pointers the fast call packs for the same
    arguments: anything else is a launch-path bug, and raises."""
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    kernel = StubKernel(1, [])
    params = ops.MOE_PARAMS.pack(*([0] * 10), *([0] * 17), 0, 0)
    with pytest.raises(ValueError, match="do not start with this call's pointers"):
        fast_call.remember(fast_call.INDEXED, (2, 8, packed.block_k), (a, packed.qweight, packed.scale, out),
                           (sorted_ids, expert_ids, ntp), [(kernel, (1, 1, 1), (128, 1, 1), 0, params)], 0, ())
    assert hooked["module"].plan_count() == 0


def test_switched_off_or_unbuildable_means_the_python_path(monkeypatch):
    """CHORD_FAST_CALL=0: the entry points' fast call always answers False. A build that fails
    says why in a RuntimeWarning, and the Python path serves."""
    monkeypatch.setenv(env.FAST_CALL, "0")
    assert fast_call.entry()(0) is False
    monkeypatch.setenv(env.FAST_CALL, "1")

    def broken():
        raise fast_call.BuildError("no compiler here")

    monkeypatch.setattr(fast_call, "module_path", broken)
    monkeypatch.setattr(fast_call, "_module", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call = fast_call.entry()
    assert call(0) is False
    assert any("the fast call is off" in str(w.message) and "no compiler here" in str(w.message) for w in caught)


def test_build_is_cached_by_content(module_path, monkeypatch):
    """The module's cache key covers its source, torch, Python, the compiler and the flags: the
    same inputs find the same file without building it again; any of them changed is another key."""
    monkeypatch.setenv("CHORD_CACHE_DIR", str(module_path.parents[3]))
    built = module_path.stat().st_mtime_ns
    assert fast_call.module_path() == module_path and module_path.stat().st_mtime_ns == built
    identity = fast_call._identity(fast_call.find_compiler())
    key = fast_call.module_key(identity)
    assert module_path.parent.name == key
    for part in ("source", "torch", "python", "compiler", "flags"):
        assert fast_call.module_key({**identity, part: "changed"}) != key


def test_import_builds_and_loads_nothing():
    code = ("import sys, chord_kernels, chord_kernels.ops; "
            "assert 'chord_kernels._launcher' not in sys.modules and '_chord_fast_call' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_precompile_builds_it_and_cache_shows_it(module_path, monkeypatch, capsys):
    """`chord-runtime precompile` builds the fast call beside the kernels (so serving never builds
    it on a first request) unless CHORD_FAST_CALL=0; `chord-runtime cache` says where it is."""
    from chord_kernels import cli

    monkeypatch.setattr(cli, "profile_specs", lambda name, arch: [])
    monkeypatch.setattr(fast_call, "module_path", lambda: module_path)
    assert cli.main(["precompile", "--profile", "h200_ep8", "-q"]) == 0
    assert f"fast call ready: {module_path}" in capsys.readouterr().out
    monkeypatch.setenv(env.FAST_CALL, "0")
    assert cli.main(["precompile", "--profile", "h200_ep8", "-q"]) == 0
    assert "fast call" not in capsys.readouterr().out
    monkeypatch.setattr(cli, "nvcc_version", lambda: "nvcc 13.0")
    monkeypatch.setattr(fast_call, "cached_path", lambda: module_path)
    assert cli.main(["cache"]) == 0
    assert f"fast call: {module_path}" in capsys.readouterr().out


def test_entry_points_bind_the_fast_call_on_their_first_cuda_call(monkeypatch):
    """ops._fast_call starts as a binder: the first call asks fast_call.entry() once and calls
    what it returned from then on; _unbind_fast_call puts the binder back."""
    asked = []
    monkeypatch.setattr(fast_call, "entry", lambda: asked.append(1) or (lambda *args: args == ("known",)))
    ops._unbind_fast_call()
    assert ops._fast_call is ops._FAST_CALL_BINDER
    assert ops._fast_call("known") is True and ops._fast_call("other") is False and asked == [1]
    ops._unbind_fast_call()
    assert ops._fast_call is ops._FAST_CALL_BINDER
