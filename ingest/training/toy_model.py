"""The training side's one toy model: a small GPT (pre-LN, causal attention, learned positions) over a
vocabulary of ``shape.vocab`` tokens, dense or with a top-1 mixture-of-experts last block, in torch;
and its next-token loss.

The experiment trains it on bytes (vocabulary 256; the MoE variant is mechanism C), the demo trainer
on a 32-token Markov source (:mod:`ingest.training.demo_trainer`); both through the one training
step of :mod:`ingest.training.train_loop`.

torch is imported inside :func:`build_gpt` so that importing the ``stabscope`` CLI costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

BYTE_VOCAB = 256
"""The experiment's vocabulary: bytes."""


@dataclass(frozen=True)
class ModelShape:
    """The model's size. ``experts`` 0: dense MLPs; >= 2: the last block's MLP is a top-1 routed set of
    that many experts (Switch style: the token's output is its expert's output times the router's
    probability; one MoE layer keeps mechanism C's runs near the dense ones' cost on CPU)."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seq_len: int = 64
    experts: int = 0
    vocab: int = BYTE_VOCAB
    """Token ids are 0 .. vocab - 1."""


def build_gpt(shape: ModelShape, seed: int) -> nn.Module:
    """The model, its initial weights a function of ``seed``. ``model.router_loads()`` returns each MoE
    layer's max-over-mean expert load of the last forward pass (empty for a dense model)."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(shape.d_model, 3 * shape.d_model)
            self.out = nn.Linear(shape.d_model, shape.d_model)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, shape.n_heads, d // shape.n_heads).permute(2, 0, 3, 1, 4)
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out: torch.Tensor = self.out(y.transpose(1, 2).reshape(b, t, d))
            return out

    def mlp() -> nn.Module:
        return nn.Sequential(
            nn.Linear(shape.d_model, 4 * shape.d_model), nn.GELU(), nn.Linear(4 * shape.d_model, shape.d_model)
        )

    class TopOneMoE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = nn.Linear(shape.d_model, shape.experts, bias=False)
            self.experts = nn.ModuleList(mlp() for _ in range(shape.experts))
            self.last_load = 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            flat = x.reshape(-1, x.shape[-1])
            probs = torch.softmax(self.router(flat), dim=-1)
            weight, choice = probs.max(dim=-1)
            out = torch.zeros_like(flat)
            counts = torch.bincount(choice, minlength=shape.experts)
            self.last_load = float(counts.max()) / max(float(counts.float().mean()), 1e-9)
            for e, expert in enumerate(self.experts):
                picked = (choice == e).nonzero(as_tuple=True)[0]
                if picked.numel():
                    out[picked] = expert(flat[picked]) * weight[picked, None]
            return out.view_as(x)

    class Block(nn.Module):
        def __init__(self, routed: bool) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(shape.d_model)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(shape.d_model)
            self.mlp = TopOneMoE() if routed else mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            out: torch.Tensor = x + self.mlp(self.norm2(x))
            return out

    class ToyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(shape.vocab, shape.d_model)
            self.position = nn.Parameter(torch.randn(shape.seq_len, shape.d_model) * 0.02)
            last = shape.n_layers - 1
            self.blocks = nn.ModuleList(Block(i == last and shape.experts >= 2) for i in range(shape.n_layers))
            self.norm = nn.LayerNorm(shape.d_model)
            self.head = nn.Linear(shape.d_model, shape.vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens) + self.position[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            logits: torch.Tensor = self.head(self.norm(x))
            return logits

        def router_loads(self) -> list[float]:
            return [float(b.mlp.last_load) for b in self.blocks if isinstance(b.mlp, TopOneMoE)]

    torch.manual_seed(seed)
    return ToyGPT()


def next_token_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats/token) of ``tokens`` (batch x (seq_len + 1) token ids)."""
    from torch.nn import functional

    logits = model(tokens[:, :-1])
    loss: torch.Tensor = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    return loss
