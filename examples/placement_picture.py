"""A picture of where a program runs: a flax language model's Adam step on Core ML whose token
hashing (a bitwise and, which MIL cannot express) runs on the host.

    python examples/placement_picture.py [--backend coreml] [--out flax-lm-placement]

Prints the placement, writes it as Graphviz DOT one box per segment (`<out>.dot`; the program
has some 280 ops, too many to draw one by one) and, where the `graphviz` package and program are
installed, as SVG (`<out>.svg`; the picture in the docs' "Pictures of a program" page is this
file). Checks the step's loss against jax.jit.
"""
import argparse

import flax.linen as fnn
import jax
import numpy as np
import optax

import rlx_jax

VOCAB, DIM, HEADS = 16, 32, 2


class LM(fnn.Module):
    @fnn.compact
    def __call__(self, tokens):
        tokens = (tokens * 7 + 3) & (VOCAB - 1)          # hashed ids: a bitwise op
        x = fnn.Embed(VOCAB, DIM)(tokens)
        h = fnn.LayerNorm()(x)
        x = x + fnn.MultiHeadDotProductAttention(num_heads=HEADS)(
            h, h, mask=fnn.make_causal_mask(tokens))
        x = x + fnn.Dense(DIM)(jax.nn.gelu(fnn.Dense(2 * DIM)(fnn.LayerNorm()(x))))
        return fnn.Dense(VOCAB)(fnn.LayerNorm()(x))


def make(batch=2, seq=8, seed=0):
    model, opt = LM(), optax.adam(1e-3)
    r = np.random.default_rng(seed)
    tokens = r.integers(0, VOCAB, (batch, seq)).astype(np.int32)
    labels = r.integers(0, VOCAB, (batch, seq)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(seed), tokens)

    def loss(p, tokens, labels):
        logits = model.apply(p, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def step(p, state, tokens, labels):
        value, grads = jax.value_and_grad(loss)(p, tokens, labels)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value
    return step, (params, opt.init(params), tokens, labels)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="coreml")
    ap.add_argument("--out", default="flax-lm-placement")
    a = ap.parse_args(argv)
    step, args = make()
    jitted = rlx_jax.jit(step, backend=a.backend)
    placement = jitted.lower(*args).placement()
    print(placement)
    with open(a.out + ".dot", "w") as f:
        f.write(placement.to_dot(detail="segments"))
    try:
        svg = placement.to_svg(detail="segments")
    except (ImportError, RuntimeError) as e:
        print(f"no SVG: {e}")
    else:
        with open(a.out + ".svg", "w") as f:
            f.write(svg)
    ours, want = jitted(*args)[2], jax.jit(step)(*args)[2]
    np.testing.assert_allclose(ours, want, rtol=2e-4, atol=2e-5)
    print(f"loss {float(ours):.6f} (jax.jit {float(want):.6f}); wrote {a.out}.dot")


if __name__ == "__main__":
    main()
