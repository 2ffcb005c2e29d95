//! How a request picks its tokens, checked on the host and carried out on the device.
//!
//! The step program samples (see `ttpu/_llm.py`): greedy at temperature 0, else a Gumbel-max
//! draw whose uniform numbers hash the request's 32-bit seed, its token counter and the
//! vocabulary index, so a seeded request draws the same tokens in any batch. Top-k and top-p
//! thresholds are found by bisection over each row's logits, without a sort. The draws run only
//! on the rows that sample and the filters only on the rows that filter: [`subset`] lists them
//! for the program, padded to a power of two.

use crate::{Error, Result};

/// The largest temperature accepted (OpenAI's limit).
pub const MAX_TEMPERATURE: f32 = 2.0;

/// One request's sampling parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// `0` is greedy; otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; `0` keeps all.
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`; `1` keeps all.
    pub top_p: f32,
    /// The random stream; equal seeds give equal draws.
    pub seed: u64,
}

impl Sampling {
    /// Greedy decoding.
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 };

    /// Checks the parameters; the error names the field at fault.
    pub fn check(&self) -> Result<()> {
        if !self.temperature.is_finite() || !(0.0..=MAX_TEMPERATURE).contains(&self.temperature) {
            return Err(Error::invalid(
                "temperature",
                format!("must be a number in [0, {MAX_TEMPERATURE}], got {}", self.temperature),
            ));
        }
        if !self.top_p.is_finite() || self.top_p <= 0.0 || self.top_p > 1.0 {
            return Err(Error::invalid("top_p", format!("must be a number in (0, 1], got {}", self.top_p)));
        }
        Ok(())
    }

    /// Whether top-k or top-p restricts the draw (only when sampling).
    pub fn filters(&self) -> bool {
        self.temperature > 0.0 && (self.top_k > 0 || self.top_p < 1.0)
    }

    /// The seed the program hashes: 32 bits, both halves of the request's seed folded in.
    pub fn seed32(&self) -> i64 {
        i64::from((self.seed ^ (self.seed >> 32)) as u32)
    }
}

/// The indices of the rows where `wanted` holds, padded to a power of two (at most `batch`, at
/// least 1) with repeats of the first, or with row 0 when none is wanted: the program leaves a
/// row that does not want the work as it was, so padding changes nothing.
pub fn subset(wanted: impl IntoIterator<Item = bool>, batch: usize) -> Vec<i64> {
    let rows: Vec<i64> =
        wanted.into_iter().enumerate().filter(|(_, wanted)| *wanted).map(|(index, _)| index as i64).collect();
    let size = rows.len().max(1).checked_next_power_of_two().unwrap_or(batch).min(batch.max(rows.len())).max(1);
    let pad = rows.first().copied().unwrap_or(0);
    rows.iter().copied().chain(std::iter::repeat(pad)).take(size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_k: u32, top_p: f32) -> Sampling {
        Sampling { temperature, top_k, top_p, seed: 7 }
    }

    #[test]
    fn parameters_out_of_range_name_their_field() {
        let message = |s: Sampling| s.check().expect_err("out of range").to_string();
        assert_eq!(message(sampling(-0.5, 0, 1.0)), "`temperature`: must be a number in [0, 2], got -0.5");
        assert_eq!(message(sampling(f32::NAN, 0, 1.0)), "`temperature`: must be a number in [0, 2], got NaN");
        assert_eq!(message(sampling(1.0, 0, 0.0)), "`top_p`: must be a number in (0, 1], got 0");
        assert_eq!(message(sampling(1.0, 0, 1.5)), "`top_p`: must be a number in (0, 1], got 1.5");
        assert!(sampling(2.0, 40, 0.9).check().is_ok());
    }

    #[test]
    fn subsets_list_the_rows_padded_to_a_power_of_two() {
        assert_eq!(subset([false, true, false, true, true], 8), vec![1, 3, 4, 1]);
        assert_eq!(subset([false, false], 2), vec![0]);
        assert_eq!(subset([true; 5], 6), vec![0, 1, 2, 3, 4, 0]);
        assert_eq!(subset([true; 8], 8), (0..8).collect::<Vec<i64>>());
        let filters = [sampling(0.0, 5, 0.5), sampling(1.0, 0, 1.0), sampling(0.7, 3, 1.0)];
        assert_eq!(subset(filters.iter().map(Sampling::filters), 4), vec![2]);
    }

    #[test]
    fn the_seed_folds_both_halves() {
        let seed = |seed: u64| Sampling { seed, ..Sampling::GREEDY }.seed32();
        assert_eq!(seed(5), 5);
        assert_eq!(seed(1 << 32), 1);
        assert_ne!(seed(1 << 32), seed(0));
        assert!((0..=u32::MAX as i64).contains(&seed(u64::MAX)));
    }
}
