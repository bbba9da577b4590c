"""DRAW (Gregor et al. 2015), the generative model of the paper's section 6.4, with the attention read and write.

Per glimpse t = 1..T, from the canvas c_{t-1} (Bernoulli logits of the image, c_0 = 0):

    x^_t   = x - sigmoid(c_{t-1})
    r_t    = read(x, x^_t, h^dec_{t-1})                    N x N Gaussian filterbank windows of both
    h^enc_t = RNN^enc(h^enc_{t-1}, [r_t, h^dec_{t-1}])
    z_t    ~ Q(z_t | h^enc_t) = N(mu_t, sigma_t)          mu_t, log sigma_t linear in h^enc_t
    h^dec_t = RNN^dec(h^dec_{t-1}, z_t)
    c_t    = c_{t-1} + write(h^dec_t)                      an N_w x N_w patch placed by its own window

The loss is the negative variational bound in nats per image: -log D(x | c_T) (Bernoulli) plus
sum_t KL(Q(z_t | h^enc_t) || N(0, I)). The model returns both terms (the canvas logits and the KL per image)
and the task (lnbench.training.tasks, "bound") adds them up.

Both RNNs are cells of lnbench.nn.rnn, run step by step (the encoder's input at t needs the decoder's state at
t-1). The paper's LN for DRAW is the cell-state-only variant (cell `lstm_norm_c`, supplement eqs. 53-55);
`model.cell=lstm` gives the LN-LSTM of eqs. 20-22 instead.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lnbench.data.base import DataSpec
from lnbench.errors import ConfigError
from lnbench.models.conv import image_side
from lnbench.models.mlp import check_compatible
from lnbench.nn.norm import NormConfig, as_norm_config, normalizer
from lnbench.nn.rnn import CELL_STATE_NORM, CELLS

EVAL_NOISE_SEED = 0  # evaluation draws z from its own generator: its bound is repeatable and training's RNG untouched


class Attention(nn.Module):
    """DRAW's N x N grid of Gaussian filters over an A x A image, placed by 5 numbers read from h^dec
    (Gregor et al. eqs. 19-26): centre (g~x, g~y), log variance, log stride, log intensity."""

    def __init__(self, hidden_size: int, side: int, n: int):
        super().__init__()
        self.side, self.n = side, n
        self.params = nn.Linear(hidden_size, 5)
        self.register_buffer(
            "grid", torch.arange(n, dtype=torch.float32) - n / 2 - 0.5 + 1, persistent=False
        )  # i - N/2 - 0.5, i = 1..N
        # pixel coordinates 1..A, so that the centre (A + 1) / 2 of g~ = 0 is the image's centre
        self.register_buffer("pixels", torch.arange(1, side + 1, dtype=torch.float32), persistent=False)

    def filters(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(F_y, F_x) each (B, N, A), rows summing to 1, and gamma (B, 1, 1)."""
        g, log_var, log_delta, log_gamma = self.params(h).split([2, 1, 1, 1], -1)
        A = self.side
        centre = (A + 1) / 2 * (g.flip(-1) + 1)  # (g~y, g~x): F_y first
        delta = (A - 1) / (self.n - 1) * torch.exp(log_delta)
        mu = centre[..., None] + self.grid.to(h.dtype) * delta[..., None]  # (B, 2, N)
        f = torch.exp(-((self.pixels.to(h.dtype) - mu[..., None]) ** 2) / (2 * torch.exp(log_var)[..., None, None]))
        f = f / f.sum(-1, keepdim=True).clamp_min(1e-8)
        return f[:, 0], f[:, 1], torch.exp(log_gamma)[..., None]

    def read(self, images: tuple[Tensor, ...], h: Tensor) -> Tensor:
        """gamma * F_y image F_x^T for each (B, A, A) image, flattened and joined: (B, len(images) N^2)."""
        fy, fx, gamma = self.filters(h)
        return torch.cat([(gamma * fy @ im @ fx.transpose(1, 2)).flatten(1) for im in images], -1)

    def write(self, patch: Tensor, h: Tensor) -> Tensor:
        """1/gamma * F_y^T patch F_x for a (B, N, N) patch: (B, A * A)."""
        fy, fx, gamma = self.filters(h)
        return (fy.transpose(1, 2) @ patch @ fx / gamma).flatten(1)


class DRAW(nn.Module):
    """DRAW with attention on binarized images; forward(x) -> (canvas logits (B, A*A), KL per image (B,))."""

    accepts = "binary"

    def __init__(
        self,
        spec: DataSpec,
        glimpses: int = 64,
        hidden_size: int = 256,
        latent_size: int = 100,
        read_size: int = 2,
        write_size: int = 5,
        cell: str = CELL_STATE_NORM,
        norm: NormConfig | None = None,
    ):
        super().__init__()
        check_compatible(self, spec)
        norm = as_norm_config(norm)
        cell = getattr(cell, "value", cell)
        for key, value in (("glimpses", glimpses), ("hidden_size", hidden_size), ("latent_size", latent_size)):
            if value < 1:
                raise ConfigError(f"model.{key}={value} is not allowed for DRAW: it must be an integer >= 1.")
        for key, value in (("read_size", read_size), ("write_size", write_size)):
            if value < 2:
                raise ConfigError(
                    f"model.{key}={value} is not allowed for DRAW: an attention window is an N x N grid "
                    "with N >= 2 (its stride divides by N - 1); Gregor et al. use 2 to read, 5 to write MNIST."
                )
        if normalizer(norm.kind).batch_stats:
            raise ConfigError(
                f"model.norm.kind={normalizer(norm.kind).name} is not allowed for DRAW: "
                "batch statistics per glimpse are not "
                "part of the paper's experiment; use a per-case normalizer (none, layer, rms, group)."
            )
        self.side = image_side(spec, "DRAW")
        for key, value in (("read_size", read_size), ("write_size", write_size)):
            if value > self.side:  # more filters than pixels: a window finer than the image, at N^2 inputs a glimpse
                raise ConfigError(
                    f"model.{key}={value} is not allowed for DRAW on {self.side} x {self.side} images: an attention "
                    f"window is an N x N grid of filters over the image, N from 2 to its side ({self.side}); Gregor "
                    "et al. use 2 to read, 5 to write MNIST."
                )
        self.spec, self.norm, self.glimpses = spec, norm, glimpses
        self.read_att, self.write_att = (
            Attention(hidden_size, self.side, read_size),
            Attention(hidden_size, self.side, write_size),
        )
        self.encoder = CELLS[cell](2 * read_size**2 + hidden_size, hidden_size, norm, time_steps=glimpses)
        self.decoder = CELLS[cell](latent_size, hidden_size, norm, time_steps=glimpses)
        self.latent = nn.Linear(hidden_size, 2 * latent_size)  # mu, log sigma
        self.patch = nn.Linear(hidden_size, write_size**2)

    def kept_bytes_per_glimpse(self) -> int:
        """A floor on the bytes autograd keeps per case and glimpse (the canvas and its sigmoid, A x A float32 each):
        lnbench.launch.preflight refuses glimpses a batch cannot hold before it runs a forward of that many."""
        return 2 * self.side**2 * 4

    def noise(self, like: Tensor, generator: torch.Generator | None) -> Tensor:
        if generator is None:
            return torch.randn_like(like)
        return torch.randn(like.shape, generator=generator, dtype=like.dtype).to(like.device)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, A = x.shape[0], self.side
        generator = None if self.training else torch.Generator().manual_seed(EVAL_NOISE_SEED)
        image = x.view(B, A, A)
        canvas = x.new_zeros(B, A * A)
        enc = self.encoder.initial_state(B, x)
        dec = self.decoder.initial_state(B, x)
        h_dec, posterior = dec[0], []
        for t in range(self.glimpses):
            error = (x - torch.sigmoid(canvas)).view(B, A, A)
            r = self.read_att.read((image, error), h_dec)
            h_enc, enc = self.encoder.step(self.encoder.project_input(torch.cat([r, h_dec], -1)), enc, t)
            mu, log_sigma = self.latent(h_enc).chunk(2, -1)
            z = mu + torch.exp(log_sigma) * self.noise(mu, generator)
            posterior.append((mu, log_sigma))
            h_dec, dec = self.decoder.step(self.decoder.project_input(z), dec, t)
            n = self.write_att.n
            canvas = canvas + self.write_att.write(self.patch(h_dec).view(B, n, n), h_dec)
        mu, log_sigma = (torch.stack(p, 0) for p in zip(*posterior))  # (T, B, Z): the KL of every glimpse at once
        kl = 0.5 * (mu.square() + torch.exp(2 * log_sigma) - 2 * log_sigma - 1).sum((0, 2))
        return canvas, kl
