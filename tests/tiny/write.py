"""One GGUF writer for every tiny model, and a folder that makes each model once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf

from .spec import TinySpec
from .vocab import add_tokenizer, vocabulary
from .weights import model_weights, stored

_SHARED = ("token_embd.weight", "output_norm.weight", "output.weight")   # what an mtp-*.gguf repeats


def _llama_params(w: gguf.GGUFWriter, s: TinySpec) -> None:
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_dimension_count(s.n_embd // s.n_head)
    w.add_layer_norm_rms_eps(1e-5)


def _mamba_params(w: gguf.GGUFWriter, s: TinySpec) -> None:
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_head_count_kv(0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_inner_size(s.d_inner)
    w.add_ssm_state_size(s.d_state)
    if s.arch == "mamba":
        w.add_ssm_time_step_rank(s.dt_rank or -(-s.n_embd // 16))
    else:
        w.add_ssm_time_step_rank(s.dt_rank or 4)
        w.add_ssm_group_count(s.n_group)


def _lfm2_params(w: gguf.GGUFWriter, s: TinySpec) -> None:
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    # llama.cpp marks a layer recurrent (short convolution) where head_count_kv is 0
    w.add_head_count_kv([s.n_head_kv if i in s.attn_layers else 0 for i in range(s.n_layer)])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(1_000_000.0)
    w.add_shortconv_l_cache(s.l_cache)


def _qwen35_params(w: gguf.GGUFWriter, s: TinySpec) -> None:
    if s.with_mtp:
        w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.n_rot)
    w.add_rope_dimension_sections([s.n_rot // 2 - s.n_rot // 4, s.n_rot // 4, 0, 0])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_state_size(s.d_state)
    w.add_ssm_group_count(s.n_k_heads)
    w.add_ssm_time_step_rank(s.n_v_heads)
    w.add_ssm_inner_size(s.d_state * s.n_v_heads)
    w.add_full_attention_interval(s.full_attention_interval)


_PARAMS = {"llama": _llama_params, "mamba": _mamba_params, "mamba2": _mamba_params, "lfm2": _lfm2_params,
           "qwen35": _qwen35_params}


def write_model(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a loadable tiny GGUF model.

    Args:
        path: the file to write (replaced if it exists).
        spec: what to generate (a qwen35 ``part`` picks the whole model, trunk or MTP block).

    Returns:
        ``path`` as a Path.
    """
    path = Path(path)
    tokens, types, merges = vocabulary(spec)
    weights = model_weights(spec, len(tokens))
    mtp_prefix = f"blk.{spec.n_layer}."
    if spec.part == "trunk":
        weights = {k: v for k, v in weights.items() if not k.startswith(mtp_prefix)}
    elif spec.part == "mtp":
        weights = {k: v for k, v in weights.items() if k.startswith(mtp_prefix) or k in _SHARED}

    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(spec.name + ("-mtp" if spec.part == "mtp" else ""))
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer + (1 if spec.with_mtp else 0))
    _PARAMS[spec.arch](w, spec)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.f16 else gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w, spec, tokens, types, merges)
    for name, arr in weights.items():
        w.add_tensor(name, stored(name, arr, spec.f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def split_paths(root: Path, spec: TinySpec, stem: str) -> tuple[Path, Path]:
    """Write a qwen35 ``spec`` as a trunk GGUF and a sibling ``mtp-*.gguf``.

    Returns:
        (trunk path, MTP head path), ``root/stem.gguf`` and ``root/mtp-stem.gguf``.
    """
    trunk = write_model(Path(root) / f"{stem}.gguf", spec.with_(mtp=True, part="trunk"))
    head = write_model(Path(root) / f"mtp-{stem}.gguf", spec.with_(mtp=True, part="mtp"))
    return trunk, head


@dataclass
class TinyZoo:
    """Writes tiny models into one folder on demand, each spec once.

    A name another spec already took gets a numbered sibling (``name-2.gguf``), so any
    number of tests can share one zoo.
    """

    root: Path
    made: dict[TinySpec, Path] = field(default_factory=dict)

    def get(self, spec: TinySpec = TinySpec(), name: str | None = None) -> Path:
        """The path of ``spec``'s model, written now if this zoo has not written it yet.

        Args:
            spec: what to generate.
            name: the file name the first time (default ``tiny-N.gguf``).
        """
        if spec not in self.made:
            path = Path(self.root) / (name or f"tiny-{len(self.made)}.gguf")
            taken = set(self.made.values())
            n = 1
            while path in taken:
                n += 1
                path = path.with_name(f"{Path(name or 'tiny').stem}-{n}.gguf")
            self.made[spec] = write_model(path, spec)
        return self.made[spec]
