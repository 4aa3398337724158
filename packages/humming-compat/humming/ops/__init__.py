"""``humming.ops``: the torch.library custom ops vLLM's graphs call, each a thin call into chord_kernels.

Registered with fake (meta) implementations, so torch.compile / Dynamo trace them without
running them; both mutate the ``outputs`` buffer vLLM hands in and return nothing, which keeps
vLLM's workspaces the only memory the MoE touches. No host sync: routing counts stay on the
device (``chord_kernels`` reads them there), and every host decision comes from shapes and
strings.
"""



import torch

from ..errors import not_supported


@torch.library.custom_op("humming::chord_moe_gemm", mutates_args=("outputs",))
def chord_moe_gemm(inputs: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, outputs: torch.Tensor,
                   sorted_ids: torch.Tensor | None, expert_ids: torch.Tensor | None,
                   num_tokens_padded: torch.Tensor | None, expert_layout: torch.Tensor | None,
                   mode: str, block_k: int, top_k: int, block_m: int, expected_m: int) -> None:
    """``outputs`` <- the MoE GEMM of ``inputs`` with the packed weight, routed per ``mode``."""
    import chord_kernels
    from chord_kernels.layouts import PackedW4A16

    packed = PackedW4A16(mode=mode, qweight=qweight, scale=scale, block_k=block_k)
    out = outputs.view(-1, outputs.shape[-1])
    if mode == "indexed":
        chord_kernels.indexed(inputs, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out=out)
    elif mode == "contiguous":  # vLLM's per-expert offsets [E+1], read natively (no padding copy)
        offsets = expert_layout if expert_layout.dtype == torch.int64 else expert_layout.to(torch.int64)
        chord_kernels.contiguous_offsets(inputs.reshape(-1, inputs.shape[-1]), packed, offsets, out=out,
                                         expected_m=max(1, expected_m))
    else:  # masked: per-expert valid counts
        counts = expert_layout if expert_layout.dtype == torch.int32 else expert_layout.to(torch.int32)
        chord_kernels.masked(inputs.reshape(-1, inputs.shape[-1]), packed, counts, max(1, expected_m), out=out)


@chord_moe_gemm.register_fake
def _(inputs, qweight, scale, outputs, sorted_ids, expert_ids, num_tokens_padded, expert_layout,
      mode, block_k, top_k, block_m, expected_m) -> None:
    return None


SILU_AND_MUL_IMPLS = frozenset({"(a/(1.f+expf(-a)))*b", "a/(1.f+expf(-a))*b"})


def activation_kind(activation_type: str, activation_impl: str | None) -> str:
    """``"none"`` or ``"silu_mul"``; any other activation raises, naming it."""
    if activation_type in (None, "none"):
        return "none"
    impl = "".join((activation_impl or "").split())
    if activation_type == "binary_split" and impl in SILU_AND_MUL_IMPLS:
        return "silu_mul"
    raise not_supported(f"MoE activation {activation_type!r} with expression {activation_impl!r}",
                        "Chord implements SiLU-and-mul (binary_split, (a / (1.f + expf(-a))) * b)")


@torch.library.custom_op("humming::chord_process_input", mutates_args=("outputs",))
def chord_process_input(inputs: torch.Tensor, outputs: torch.Tensor, activation: str, layout: str,
                        scatter_idx: torch.Tensor | None, expert_tokens: torch.Tensor | None,
                        num_valid_tokens: torch.Tensor | None, zero_invalid: bool) -> None:
    """Activation between the GEMMs and the row moves vLLM asks for, in torch ops (CPU or GPU).

    ``normal``: row i -> row i. ``scatter``: row i -> rows ``scatter_idx[i, j]`` (targets outside
    ``[0, scatter_idx.numel())`` or at/after ``num_valid_tokens`` skipped). ``grouped_mask``:
    rows of expert e past ``expert_tokens[e]`` are invalid. Invalid rows are left as they were,
    or zeroed with ``zero_invalid``.
    """
    x = inputs.reshape(-1, inputs.shape[-1])
    if activation == "silu_mul":
        half = x.shape[-1] // 2
        gate, up = x[:, :half].float(), x[:, half:].float()
        x = (torch.nn.functional.silu(gate) * up).to(outputs.dtype)
    out = outputs.view(-1, outputs.shape[-1])
    rows_in, rows_out = x.shape[0], out.shape[0]
    if layout == "scatter":
        idx = scatter_idx.reshape(rows_in, -1).long()
        ok = (idx >= 0) & (idx < idx.numel())
        if num_valid_tokens is not None:
            ok = ok & (idx < num_valid_tokens.reshape(()).long())
        src = torch.arange(rows_in, device=x.device).unsqueeze(1).expand_as(idx)
        # source row of every output row through one spare slot (no host sync, no boolean indexing)
        table = torch.full((rows_out + 1,), -1, dtype=torch.long, device=x.device)
        table.scatter_(0, torch.where(ok, idx, rows_out).reshape(-1), src.reshape(-1))
        table = table[:rows_out]
        have = (table >= 0).unsqueeze(1)
        gathered = x.index_select(0, table.clamp(min=0))
        fill = torch.zeros_like(out) if zero_invalid else out
        out.copy_(torch.where(have, gathered, fill))
        return
    rows = torch.arange(rows_in, device=x.device)
    valid = None
    if layout == "grouped_mask":
        per_expert = rows_in // expert_tokens.numel()
        valid = (rows % per_expert) < expert_tokens.long().repeat_interleave(per_expert)
    elif num_valid_tokens is not None:
        valid = rows < num_valid_tokens.reshape(()).long()
    if valid is None:
        out[:rows_in].copy_(x)
    else:
        fill = torch.zeros_like(x) if zero_invalid else out[:rows_in]
        out[:rows_in].copy_(torch.where(valid.unsqueeze(1), x, fill))


@chord_process_input.register_fake
def _(inputs, outputs, activation, layout, scatter_idx, expert_tokens, num_valid_tokens, zero_invalid) -> None:
    return None


def process_input(inputs, outputs=None, **kwargs):
    """humming's ``ops.process_input`` signature, answered by :func:`humming.forward.may_process_input`."""
    from ..forward import _process

    return _process(inputs, outputs=outputs, **kwargs)


def humming_gemm(*args, **kwargs):
    raise not_supported("humming.ops.humming_gemm (the raw kernel entry)", "call humming.forward.humming_forward")


__all__ = ["activation_kind", "chord_moe_gemm", "chord_process_input", "humming_gemm", "process_input"]
