"""Constrained decoding: a GBNF grammar that every emitted token must follow, speculation on.

The grammar runs through llama.cpp's own grammar sampler (``llama_sampler_init_grammar``),
so a grammar means what it means to llama.cpp; JSON schemas become GBNF with
llama-cpp-python's converter, which is llama.cpp's ``json_schema_to_grammar`` in Python.

The target's distribution at a position is the one llama.cpp's sampling gives under a
grammar: the logits of the tokens the grammar forbids there are taken out first, then
top-k, top-p, min-p and temperature run on what is left (greedy: the best allowed token).
Verifying a draft of n tokens checks each one against the grammar state the tokens before
it leave: position i's row is judged by the state after the accepted sequence and the
first i draft tokens, so a draft token the grammar forbids has probability 0 and is
rejected, and one it allows is accepted exactly when the target alone would have chosen it
(greedy) or by rejection sampling against the grammar-constrained distribution (sampling).
Speculation therefore changes nothing in the output: greedy is token for token what the
target alone writes under the same grammar. The state then moves over the accepted tokens
and the target's own token only.
"""

from __future__ import annotations

import json
import weakref

import llama_cpp.llama_cpp as ll
import numpy as np

from ..errors import BadInput, LocalspecError
from .sampling import Dist, SamplingConfig, candidate_distribution, speculative_accept

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
_FIRST = 64   # candidates tried in logit order before the whole vocabulary is judged


def json_grammar() -> str:
    """GBNF for any JSON object (OpenAI's ``response_format: json_object``)."""
    from llama_cpp.llama_grammar import JSON_GBNF

    return JSON_GBNF


def schema_grammar(schema: object) -> str:
    """GBNF for the JSON values that match a JSON schema (a dict or its JSON text).

    Raises:
        BadInput: the schema is not a JSON object or the converter cannot handle it.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise BadInput(f"the JSON schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise BadInput("the JSON schema must be an object")
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except (ValueError, KeyError, TypeError, NotImplementedError, AssertionError, RecursionError) as exc:
        raise BadInput(f"cannot turn the JSON schema into a grammar: {type(exc).__name__}: {exc}") from None


def check_grammar(model, gbnf: str) -> None:
    """Parse a grammar against a model's vocabulary once.

    Raises:
        BadInput: llama.cpp rejects the grammar (its message, in one line).
    """
    Grammar(model, gbnf).close()


class Grammar:
    """One grammar's parse state over one model's vocabulary.

    Args:
        model: the :class:`~localspec.engine.backend.Model` whose tokens are judged.
        gbnf: the grammar text; its start rule is ``root``.

    Raises:
        BadInput: llama.cpp cannot parse the grammar.
    """

    def __init__(self, model, gbnf: str, *, _ptr=None):
        self.model = model
        self.gbnf = gbnf
        if _ptr is None:
            from .backend import clear_log, last_log_error

            clear_log()
            _ptr = ll.llama_sampler_init_grammar(model.vocab, gbnf.encode("utf-8"), b"root")
            if not _ptr:
                why = last_log_error() or "llama.cpp cannot parse it"
                raise BadInput(f"grammar: {why}")
        self._sampler = _Sampler(_ptr)
        self._eog = model.eog_mask

    @property
    def ptr(self):
        return self._sampler.ptr

    def clone(self) -> Grammar:
        """An independent copy of this state."""
        return Grammar(self.model, self.gbnf, _ptr=ll.llama_sampler_clone(self.ptr))

    def close(self) -> None:
        self._sampler.close()

    def accept(self, token: int) -> None:
        """Move the state over one token (which :meth:`allowed` must have allowed)."""
        if not self._eog[token]:
            ll.llama_sampler_accept(self.ptr, token)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` the grammar allows next (a bool array)."""
        data = np.zeros(len(ids), dtype=_TOKEN_DATA)
        data["id"] = ids
        arr = ll.llama_token_data_array(data=data.ctypes.data_as(ll.llama_token_data_p), size=len(ids),
                                        selected=-1, sorted=False)
        ll.llama_sampler_apply(self.ptr, arr)
        return data["logit"] > -np.inf

    def _ranked(self, row: np.ndarray, m: int) -> np.ndarray:
        """The ``m`` ids with the largest logits, best first (ties to the lower id)."""
        if m >= row.shape[0]:
            top = np.arange(row.shape[0])
        else:
            top = np.argpartition(-row, m - 1)[:m]
        return top[np.lexsort((top, -row[top]))]

    def argmax(self, row: np.ndarray) -> int:
        """The allowed token with the largest logit (the lowest id among equals).

        Raises:
            LocalspecError: the grammar allows no token here.
        """
        top = int(row.argmax())
        if self.allowed(np.array([top]))[0]:
            return top
        ranked = self._ranked(row, _FIRST)
        ok = self.allowed(ranked)
        if ok.any():
            return int(ranked[int(ok.argmax())])
        ids = self._allowed_ids(row)
        return int(ids[int(row[ids].argmax())])

    def _allowed_ids(self, row: np.ndarray) -> np.ndarray:
        ids = np.flatnonzero(self.allowed(np.arange(row.shape[0])))
        if ids.shape[0] == 0:
            raise LocalspecError("the grammar allows no token at this point")
        return ids

    def dist(self, row: np.ndarray, cfg: SamplingConfig) -> Dist:
        """The target's distribution under the grammar: forbidden tokens out, then top-k,
        top-p, min-p and temperature (llama.cpp's order) on the rest."""
        if cfg.greedy:
            return Dist.onehot(self.argmax(row))
        k = cfg.top_k if 0 < cfg.top_k < row.shape[0] else 0
        if k:
            ranked = self._ranked(row, max(4 * k, _FIRST))
            ok = ranked[self.allowed(ranked)]
            if ok.shape[0] >= k or ranked.shape[0] == row.shape[0]:
                ids = ok[:k]
                if ids.shape[0] == 0:
                    raise LocalspecError("the grammar allows no token at this point")
                return candidate_distribution(ids, row[ids], cfg)
        ids = self._allowed_ids(row)
        if k and ids.shape[0] > k:
            ids = ids[self._ranked(row[ids], k)]
        return candidate_distribution(ids, row[ids], cfg)

    def verify(self, rows, drafts: list[int], q: list[Dist] | None, cfg: SamplingConfig, n_vocab: int,
               rng: np.random.Generator) -> tuple[int, int]:
        """Judge a draft against the target's rows under this grammar and move the state
        over what is kept.

        Args:
            rows: full rows of logits (``rows.x``), one per draft token plus one.
            drafts: the draft tokens.
            q: the draft's distribution at each drafted position (None: one-hot).
            cfg, n_vocab, rng: as in :func:`~localspec.engine.sampling.speculative_accept`.

        Returns:
            (number of draft tokens accepted, the target's next token).
        """
        x = rows.x
        state = self.clone()
        at = 0

        def state_at(i: int) -> Grammar:
            nonlocal at
            while at < i:
                state.accept(drafts[at])
                at += 1
            return state

        if cfg.greedy:
            a = 0
            nxt = state_at(0).argmax(x[0])
            while a < len(drafts) and nxt == drafts[a]:
                a += 1
                nxt = state_at(a).argmax(x[a])
        else:
            cache: dict[int, Dist] = {}

            def p_at(i: int) -> Dist:
                if i not in cache:
                    cache[i] = state_at(i).dist(x[i], cfg)
                return cache[i]

            qs = q if q is not None else [Dist.onehot(t) for t in drafts]
            a, nxt = speculative_accept(drafts, qs, p_at, n_vocab, rng)
        state_at(a).accept(nxt)
        self._sampler, state._sampler = state._sampler, self._sampler
        state.close()
        return a, nxt


class _Sampler:
    """Owns one llama.cpp sampler and frees it once (on close or when collected)."""

    __slots__ = ("ptr", "_free", "__weakref__")

    def __init__(self, ptr):
        self.ptr = ptr
        self._free = weakref.finalize(self, ll.llama_sampler_free, ptr)

    def close(self) -> None:
        self._free()
        self.ptr = None
