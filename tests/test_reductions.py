"""l2e.reductions.chain_sum: the sum over the chain axis, left-out chains excluded even where they are not finite,
in both of its forms (unrolled up to UNROLL chains, a fori_loop beyond); and bench.leading_reduce's harness."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e import reductions
from l2e.reductions import chain_sum


@pytest.mark.parametrize("chains", [1, 4, reductions.UNROLL + 3])
def test_chain_sum_is_the_sum_over_the_kept_chains(chains):
    x = np.array(jax.random.normal(jax.random.PRNGKey(chains), (chains, 5, 3)), np.float32)
    keep = np.arange(chains) % 3 != 1
    x[~keep] = np.inf  # a divergent chain's entries
    x[~keep, 0, 0] = np.nan
    got = np.asarray(jax.jit(chain_sum)(jnp.asarray(x), jnp.asarray(keep)))
    want = x[keep].astype(np.float64).sum(0)
    assert got.shape == (5, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_chain_sum_with_no_chain_kept_is_zero_and_keeps_the_dtype():
    x = jnp.full((3, 4), jnp.nan, jnp.float32)
    out = chain_sum(x, jnp.zeros(3, bool))
    assert out.dtype == jnp.float32 and np.all(np.asarray(out) == 0.0)


def test_leading_reduce_bench_runs_and_refuses_a_bad_shape(capsys):
    from bench.leading_reduce import main, measure
    res = measure((2, 8, 4), calls=1, repeats=1)
    assert set(res["ms"]) == {"sum axis 0", "chain_sum"} and np.isfinite(res["ratio"]) and res["ratio"] > 0
    assert main(["--shapes", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
