//! `_batch_norm_with_update_functional`: training-mode batch norm as newer exports write it (the
//! op `torch.nn.functional.batch_norm` dispatches to in training), with the running statistics
//! moved by `momentum` and returned, and an empty reserve.

use ttpu_ir::{DType, Literal, Scalar};

use super::nn;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// `_batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum,
/// eps)` → (out, save_mean, save_invstd, reserve, running_mean, running_var): what
/// `_native_batch_norm_legit_functional` computes in training, and a `uint8` reserve of no elements
/// (CPU kernels keep nothing there).
pub(super) fn batch_norm_with_update(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let Imported::Tuple(items) = nn::batch_norm_update(cx, args)? else {
        return Err(cx.bad("batch norm gave no tuple"));
    };
    let reserve = cx.literal(Literal::splat(DType::U8, &[0], Scalar::Int(0)));
    let mut items = items.into_iter();
    let mut out: Vec<Imported> = items.by_ref().take(3).collect();
    out.push(Imported::Tensor(reserve));
    out.extend(items);
    Ok(Imported::Tuple(out))
}
