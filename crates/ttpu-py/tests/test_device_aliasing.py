"""Views and in-place ops on the ttpu device exactly as PyTorch has them: each case runs on the CPU
and on ``"ttpu"`` and every tensor it returns must agree, aliasing included."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_matches

import ttpu  # noqa: F401  (registers the device)


def base(device, *shape, dtype=torch.float32):
    numel = 1
    for size in shape:
        numel *= size
    return torch.arange(numel, dtype=dtype).reshape(shape).to(device)


def write_into_row(d):
    x = base(d, 3, 4)
    x[1] += 10
    return x


def write_into_column(d):
    x = base(d, 3, 4)
    x[:, 2] = -1
    return x


def write_into_flat_view(d):
    x = base(d, 2, 3)
    x.view(-1).mul_(2)
    return x


def older_view_sees_base_write(d):
    x = base(d, 2, 3)
    row = x[0]
    x.add_(100)
    return row, x


def older_view_sees_sibling_write(d):
    x = base(d, 4)
    a, b = x[:2], x[1:]
    a.mul_(-1)
    return b


def transpose_then_write(d):
    x = base(d, 2, 3)
    t = x.t()
    t[0, 1] = 99
    return x, t


def permute_then_write(d):
    x = base(d, 2, 3, 4)
    p = x.permute(2, 0, 1)
    p[3].zero_()
    return x


def slice_with_step(d):
    x = base(d, 10)
    x[::3] = 0
    return x


def negative_slice_bounds(d):
    x = base(d, 6)
    x[-4:-1] += 1
    return x


def nested_views(d):
    x = base(d, 4, 4)
    x[1:3, 1:3][0, :] = 7
    return x


def unsqueeze_view_write(d):
    x = base(d, 3)
    x.unsqueeze(0)[0, 1] = 5
    return x


def squeeze_view_write(d):
    x = base(d, 1, 3)
    x.squeeze(0).sub_(1)
    return x


def split_views(d):
    x = base(d, 7)
    first, second, third = x.split(3)
    second.fill_(0)
    return x, third


def chunk_views(d):
    x = base(d, 2, 6)
    parts = x.chunk(3, dim=1)
    parts[2].mul_(10)
    return x


def unbind_views(d):
    x = base(d, 3, 2)
    rows = x.unbind(0)
    rows[1].neg_()
    return x


def narrow_view(d):
    x = base(d, 5)
    x.narrow(0, 1, 3).add_(1)
    return x


def reshape_of_contiguous_is_a_view(d):
    x = base(d, 2, 3)
    r = x.reshape(3, 2)
    r[0, 0] = -5
    return x


def reshape_of_transpose_is_a_copy(d):
    x = base(d, 2, 3)
    r = x.t().reshape(6)
    r[0] = -5
    return x, r


def contiguous_of_transpose_is_a_copy(d):
    x = base(d, 2, 3)
    c = x.t().contiguous()
    c.add_(1)
    return x, c, c.stride()


def detach_shares_storage(d):
    x = base(d, 3)
    x.detach().add_(1)
    return x


def in_place_view_ops_move_metadata(d):
    x = base(d, 2, 3)
    x.t_()
    y = base(d, 3)
    y.unsqueeze_(1)
    z = base(d, 1, 4)
    z.squeeze_(0)
    return x, x.stride(), y, y.shape, z


def index_put_into_view(d):
    x = base(d, 3, 3)
    x[0][torch.tensor([0, 2], device=d)] = 1.5
    return x


def masked_fill_in_place(d):
    x = base(d, 2, 3)
    x.masked_fill_(x > 2, -1)
    return x


def clamp_in_place_on_view(d):
    x = base(d, 2, 5)
    x[1].clamp_(max=6)
    return x


def copy_into_view(d):
    x = base(d, 2, 3)
    x[0].copy_(torch.tensor([9.0, 8.0, 7.0]).to(d))
    return x


def copy_broadcasts(d):
    x = base(d, 2, 3)
    x.copy_(torch.tensor([1.0, 2.0, 3.0]).to(d))
    return x


def in_place_keeps_dtype(d):
    x = base(d, 3, dtype=torch.int64)
    x.mul_(2)
    x.add_(torch.tensor(1).to(d))
    return x


def float_into_int_is_refused(d):
    x = base(d, 3, dtype=torch.int64)
    try:
        x.add_(0.5)
    except RuntimeError as error:
        return "refused" if "can't be cast" in str(error) else str(error)
    return "allowed"


def in_place_shape_mismatch_is_refused(d):
    x = base(d, 3)
    try:
        x.add_(base(d, 2, 3))
    except RuntimeError as error:
        return "refused" if "doesn't match the broadcast shape" in str(error) else str(error)
    return "allowed"


def chained_in_place_ops(d):
    x = base(d, 4)
    x.mul_(2).add_(1).div_(3)
    return x


def out_argument(d):
    x, y = base(d, 3), base(d, 3)
    out = torch.empty(3).to(d)
    torch.add(x, y, out=out)
    return out


def foreach_in_place(d):
    xs = [base(d, 2), base(d, 3)]
    torch._foreach_mul_(xs, 3.0)
    torch._foreach_add_(xs, [base(d, 2), base(d, 3)], alpha=0.5)
    return xs


def view_of_view_after_base_write(d):
    x = base(d, 3, 4)
    v = x[1:, :][:, 1:3]
    x.mul_(0.5)
    return v


def expand_then_read(d):
    x = base(d, 3)
    e = x.expand(2, 3)
    x.add_(1)
    return e


def write_through_expand_is_refused(d):
    x = base(d, 1, 3)
    try:
        x.expand(2, 3).add_(1)
    except RuntimeError as error:
        return "refused" if "overlap" in str(error) or "clone" in str(error) else str(error)
    return "allowed"


def data_is_rebound(d):
    x = base(d, 3)
    y = x.view(3)
    x.data = base(d, 3) * 10
    return x, y


def set_rebinds(d):
    x = base(d, 3)
    x.set_(base(d, 2, 2))
    return x, x.shape


def strides_of_views(d):
    x = base(d, 4, 6)
    return [tuple(v.stride()) + (v.storage_offset(),) for v in (x[1], x[:, 2], x[1:3, ::2], x.t(), x.view(6, 4))]


def is_contiguous_answers_as_pytorch(d):
    x = base(d, 4, 6)
    return [v.is_contiguous() for v in (x, x.t(), x[1], x[:, 1], x[::2])]


def storage_identity(d):
    x = base(d, 4, 6)
    same = x[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    other = x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    return same, other


CASES = [
    write_into_row, write_into_column, write_into_flat_view, older_view_sees_base_write, older_view_sees_sibling_write,
    transpose_then_write, permute_then_write, slice_with_step, negative_slice_bounds, nested_views,
    unsqueeze_view_write, squeeze_view_write, split_views, chunk_views, unbind_views, narrow_view,
    reshape_of_contiguous_is_a_view, reshape_of_transpose_is_a_copy, contiguous_of_transpose_is_a_copy,
    detach_shares_storage, in_place_view_ops_move_metadata, index_put_into_view, masked_fill_in_place,
    clamp_in_place_on_view, copy_into_view, copy_broadcasts, in_place_keeps_dtype, float_into_int_is_refused,
    in_place_shape_mismatch_is_refused, chained_in_place_ops, out_argument, foreach_in_place,
    view_of_view_after_base_write, expand_then_read, write_through_expand_is_refused, data_is_rebound, set_rebinds,
    strides_of_views, is_contiguous_answers_as_pytorch, storage_identity,
]


def host(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(host(item) for item in value)
    return value


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_aliasing_matches_cpu(case):
    want = host(case("cpu"))
    got = host(case("ttpu"))
    assert_matches(got, want, case.__name__)


def test_the_aliasing_checker_rejects_a_write_that_missed_its_base():
    want = host(write_into_row("cpu"))
    missed = base("cpu", 3, 4)
    missed[1].clone().add_(10)
    with pytest.raises(AssertionError):
        assert_matches(missed, want)
