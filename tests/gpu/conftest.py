"""GPU tests' shared setup."""

import pytest


@pytest.fixture(autouse=True)
def no_fast_call_plans():
    """Each GPU test starts with no fast-call plans (chord_kernels.jit.fast_call): its first call of
    a signature is planned by the Python path under the test's own settings. Why: several tests
    patch a dispatch rule (grouped tile families) or drop the Python plans to inspect the one
    their call makes, and neither is part of a signature; without this, a signature an earlier
    test launched would launch that test's kernel from C++."""
    from chord_kernels.jit import fast_call

    fast_call.forget()
    yield
