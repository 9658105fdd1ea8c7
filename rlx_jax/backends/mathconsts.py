"""Coefficients of the special-function approximations that more than one backend composes."""

# erfc(z) = t exp(-z^2 + sum_k ERFC_CHEBYSHEV[k] t^k), t = 1 / (1 + z / 2), for z >= 0, with a
# fractional error below 1.2e-7 everywhere (a Chebyshev fit: Numerical Recipes' erfcc)
ERFC_CHEBYSHEV = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
                  -1.13520398, 1.48851587, -0.82215223, 0.17087277)
