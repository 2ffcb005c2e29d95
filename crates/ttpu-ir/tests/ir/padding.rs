//! Padding verdicts per symbol: which dynamic dims may be bucketed.

use ttpu_ir::text::parse;
use ttpu_ir::{PaddingVerdict, padding_verdicts};

fn verdicts(text: &str) -> Vec<(String, PaddingVerdict)> {
    let graph = parse(text).expect("test graphs parse");
    padding_verdicts(&graph).into_iter().map(|(symbol, verdict)| (symbol.to_string(), verdict)).collect()
}

#[test]
fn a_batch_dim_through_matmul_bias_and_activation_may_be_padded() {
    let text = "symbol b in [1, 1024]
graph @main(%0: f32[b, 16] \"x\", %1: f32[16, 8] \"w\", %2: f32[8] \"bias\") -> (f32[b, 8]) {
  %3: f32[b, 8] = dot_general(%0, %1) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}
  %4: f32[b, 8] = broadcast_in_dim(%2) {dims = [1]}
  %5: f32[b, 8] = add(%3, %4)
  %6: f32[b, 8] = tanh(%5)
  %7: f32[b] = reduce(%6) {kind = max, dimensions = [1]}
  %8: f32[b, 2, 4] = reshape(%6)
  return %5
}
";
    assert_eq!(verdicts(text), [("b".to_owned(), PaddingVerdict::Pad)]);
}

#[test]
fn reducing_or_contracting_along_a_symbol_forces_exact_compiles() {
    let text = "symbol s in [2, 64]
symbol b in [1, 8]
graph @main(%0: f32[b, s, 4] \"q\", %1: f32[b, s, 4] \"k\") -> (f32[b, s, s], f32[b, s]) {
  %2: f32[b, s, s] = dot_general(%0, %1) {lhs_batch = [0], rhs_batch = [0], lhs_contracting = [2], rhs_contracting = [2]}  # bmm: aten.bmm.default @ m.fx:3
  %3: f32[b, s] = reduce(%2) {kind = sum, dimensions = [2]}  # sum: aten.sum.dim_IntList @ m.fx:4
  return %2, %3
}
";
    assert_eq!(
        verdicts(text),
        [
            (
                "s".to_owned(),
                PaddingVerdict::Exact(
                    "`reduce` at node `sum` (aten.sum.dim_IntList @ m.fx:4) mixes positions along `s`".into()
                )
            ),
            ("b".to_owned(), PaddingVerdict::Pad),
        ]
    );
}

#[test]
fn contraction_and_reshape_across_the_symbol_are_caught() {
    let contract = "symbol s in [2, 64]
graph @main(%0: f32[4, s] \"a\", %1: f32[s, 4] \"b\") -> (f32[4, 4]) {
  %2: f32[4, 4] = dot_general(%0, %1) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}  # mm
  return %2
}
";
    assert_eq!(
        verdicts(contract),
        [("s".to_owned(), PaddingVerdict::Exact("`dot_general` at node `mm` mixes positions along `s`".into()))]
    );
    // [2, s, 3] -> [s, 6] moves the symbol's block: positions would shift with the size.
    let reshape = "symbol s in [2, 64]
graph @main(%0: f32[2, s, 3] \"a\") -> (f32[s, 6]) {
  %1: f32[s, 6] = reshape(%0)  # view
  return %1
}
";
    assert_eq!(
        verdicts(reshape),
        [("s".to_owned(), PaddingVerdict::Exact("`reshape` at node `view` mixes positions along `s`".into()))]
    );
}

#[test]
fn other_symbols_beside_a_block_keep_it_and_computed_sizes_or_read_sizes_do_not() {
    // `[b, s] -> [b, s, 1]` keeps `b` a block (the products beside it are equal as sizes), and no
    // op mixes along it; `s` is reduced over.
    let keepdim = "symbol b in [1, 8]
symbol s in [2, 64]
graph @main(%0: f32[b, s] \"x\") -> (f32[b, s, 1], f32[b]) {
  %1: f32[b, s, 1] = reshape(%0)  # keep
  %2: f32[b] = reduce(%0) {kind = sum, dimensions = [1]}  # sum
  return %1, %2
}
";
    assert_eq!(
        verdicts(keepdim),
        [
            ("b".to_owned(), PaddingVerdict::Pad),
            ("s".to_owned(), PaddingVerdict::Exact("`reduce` at node `sum` mixes positions along `s`".into())),
        ]
    );
    // Merging `s` into the dim `b` leads, or reading `b` as a value, ties results to the true size.
    let merged = "symbol b in [1, 8]
symbol s in [2, 64]
graph @main(%0: f32[b, s] \"x\") -> (f32[b*s], i64[]) {
  %1: f32[b*s] = reshape(%0)  # flat
  %2: i64[] = dim_size(%0) {dimension = 0}  # size
  return %1, %2
}
";
    assert_eq!(
        verdicts(merged),
        [
            (
                "b".to_owned(),
                PaddingVerdict::Exact(
                    "`dim_size` at node `size` reads the size `b`, which padding would change".into()
                )
            ),
            ("s".to_owned(), PaddingVerdict::Exact("`reshape` at node `flat` mixes positions along `s`".into())),
        ]
    );
    let read = "symbol b in [1, 8]
graph @main(%0: f32[b, 4] \"x\") -> (i64[]) {
  %1: i64[] = dim_size(%0) {dimension = 0}  # size
  return %1
}
";
    assert_eq!(
        verdicts(read),
        [(
            "b".to_owned(),
            PaddingVerdict::Exact("`dim_size` at node `size` reads the size `b`, which padding would change".into())
        )]
    );
}

#[test]
fn a_merge_with_the_symbol_outside_keeps_it_paddable_and_one_inside_does_not() {
    // `[b, s, 4] -> [b*s, 4]` puts the batch outside: padding it appends whole sequences at the
    // end of the merged dim, and the matmul and split back treat rows positionwise. The sequence
    // is inside the merge: padding it would shift every later sequence.
    let text = "symbol b in [1, 16]
symbol s in [2, 32]
graph @main(%0: f32[b, s, 4] \"x\", %1: f32[4, 6] \"w\") -> (f32[b, s, 6], f32[b*s, 2]) {
  %2: f32[b*s, 4] = reshape(%0)  # view
  %3: f32[b*s, 6] = dot_general(%2, %1) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}  # mm
  %4: f32[b*s, 2] = slice(%3) {start = [0, 2], limit = [b*s, 4], strides = [1, 1]}  # split
  %5: f32[b, s, 6] = reshape(%3)  # view_1
  return %5, %4
}
";
    assert_eq!(
        verdicts(text),
        [
            ("b".to_owned(), PaddingVerdict::Pad),
            ("s".to_owned(), PaddingVerdict::Exact("`reshape` at node `view` mixes positions along `s`".into())),
        ]
    );
    // Reducing over the merged dim mixes the batch's positions after all, as does slicing it.
    let reduced = "symbol b in [1, 16]
graph @main(%0: f32[b, 3, 4] \"x\") -> (f32[4], f32[2, 4]) {
  %1: f32[b*3, 4] = reshape(%0)  # view
  %2: f32[4] = reduce(%1) {kind = sum, dimensions = [0]}  # sum
  %3: f32[2, 4] = slice(%1) {start = [0, 0], limit = [2, 4], strides = [1, 1]}  # head
  return %2, %3
}
";
    assert_eq!(
        verdicts(reduced),
        [("b".to_owned(), PaddingVerdict::Exact("`reduce` at node `sum` mixes positions along `b`".into()))]
    );
    let sliced = "symbol b in [1, 16]
graph @main(%0: f32[b, 3, 4] \"x\") -> (f32[2, 4]) {
  %1: f32[b*3, 4] = reshape(%0)  # view
  %2: f32[2, 4] = slice(%1) {start = [0, 0], limit = [2, 4], strides = [1, 1]}  # head
  return %2
}
";
    assert_eq!(
        verdicts(sliced),
        [("b".to_owned(), PaddingVerdict::Exact("`slice` at node `head` mixes positions along `b`".into()))]
    );
}
