#!/usr/bin/env python3
"""Reference numbers for tests/test_optim.cpp, computed with torch.optim (PyTorch 1.13, float64).

Two parameters, a: [2, 3] and b: [4], with fixed initial values; at step k (from 0) the gradient
of element i of parameter j (a: 0, b: 1) is ((7*i + 3*k + 5*j) % 11 - 5) / 4 (exact in binary).
Prints, for each optimizer setting, the parameters after step 1 and after step 4, as C++.
Run: /usr/bin/python3 scripts/optim_reference.py
"""
import torch

A0 = [0.5, -1.2, 0.3, 2.0, -0.7, 0.1]
B0 = [1.0, -0.5, 0.25, -2.0]


def grad(j, n, k):
    return torch.tensor([((7 * i + 3 * k + 5 * j) % 11 - 5) / 4 for i in range(n)], dtype=torch.float64)


SETTINGS = {
    "sgd_plain": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "sgd_dampening": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3),
    "adam_default": lambda p: torch.optim.Adam(p, lr=0.01),
    "adam_wd": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "adamw_wd": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "adamw_default": lambda p: torch.optim.AdamW(p, lr=1e-3),
}


def fmt(t):
    return "{" + ", ".join(repr(float(x)) for x in t) + "}"


for name, make in SETTINGS.items():
    a = torch.tensor(A0, dtype=torch.float64).reshape(2, 3).requires_grad_()
    b = torch.tensor(B0, dtype=torch.float64).requires_grad_()
    opt = make([a, b])
    after = {}
    for k in range(4):
        a.grad = grad(0, 6, k).reshape(2, 3)
        b.grad = grad(1, 4, k)
        opt.step()
        if k in (0, 3):
            after[k + 1] = (a.detach().flatten().clone(), b.detach().clone())
    print(f"// {name}")
    for s, (av, bv) in after.items():
        print(f"{{\"{name}\", {s}, {fmt(av)}, {fmt(bv)}}},")
