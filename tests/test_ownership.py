"""Storage identity and byte accounting."""

import torch

import tokpool as tp


def test_shares_storage():
    a = torch.zeros(4, 3)
    assert tp.shares_storage(a, a[1:3])
    assert not tp.shares_storage(a, a[1:3].clone())
    assert not tp.shares_storage(torch.empty(0), torch.empty(0))


def test_owned_bytes_counts_unique_storages_once():
    a = torch.zeros(4, 3)  # 48 bytes
    b = torch.zeros(2, dtype=torch.bfloat16)  # 4 bytes
    assert tp.owned_bytes([a, a[1:], a[2:3], None, b]) == 52
    assert tp.owned_bytes([a, b], exclude=[a[1:]]) == 4
    assert tp.owned_bytes([]) == 0


def test_stranded_bytes_of_a_small_view():
    big = torch.zeros(100)  # 400 bytes
    assert tp.pooler.ownership.stranded_bytes([big[:10]]) == 360
    assert tp.pooler.ownership.stranded_bytes([big[:10], big[10:]]) == 0
    assert tp.pooler.ownership.stranded_bytes([big[::2]]) == 4  # strided view spans 99 elements


def test_ownership_report():
    buf = torch.zeros(6, 2)
    outs = [buf[:2], buf[2:].clone(), None]
    r = tp.pooler.ownership.ownership_report(outs, buf)
    assert (r.n_views, r.n_owned) == (1, 1)
    assert r.view_bytes == 16 and r.owned_bytes == 32 and r.stranded_bytes == 0
