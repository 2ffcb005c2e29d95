//! How a request picks its tokens, checked on the host and carried out on the device.
//!
//! The step program samples (see `ttpu/_llm.py`): greedy at temperature 0, else a Gumbel-max
//! draw whose uniform numbers hash the request's 32-bit seed, its token counter and the
//! vocabulary index, so a seeded request draws the same tokens in any batch. Top-k and top-p
//! choose among the `K` best tokens of each row; [`candidates`] picks the `K` a batch needs.

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

/// How many of the best tokens the batch's filtered draws must see: 1 when no row filters (the
/// program's top-k is then a cheap pass), every token for a top-p without top-k, else the
/// largest top-k; rounded up to a power of two (at most the vocabulary) so few sizes compile.
pub fn candidates<'a>(rows: impl IntoIterator<Item = &'a Sampling>, vocab: usize) -> usize {
    let needed = rows
        .into_iter()
        .filter(|row| row.filters())
        .map(|row| if row.top_k == 0 { vocab } else { (row.top_k as usize).min(vocab) })
        .max()
        .unwrap_or(1);
    needed.checked_next_power_of_two().unwrap_or(vocab).min(vocab).max(1)
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
    fn candidates_cover_every_filtering_row() {
        let vocab = 1000;
        assert_eq!(candidates(&[sampling(0.0, 5, 0.5), sampling(1.0, 0, 1.0)], vocab), 1);
        assert_eq!(candidates(&[sampling(1.0, 5, 1.0), sampling(0.7, 3, 1.0)], vocab), 8);
        assert_eq!(candidates(&[sampling(1.0, 64, 0.9)], vocab), 64);
        assert_eq!(candidates(&[sampling(1.0, 5, 1.0), sampling(1.0, 0, 0.9)], vocab), vocab);
        assert_eq!(candidates(&[sampling(1.0, 5000, 1.0)], vocab), vocab);
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
