//! A malformed-input corpus built from real programs: every line cut off, every line removed,
//! seeded byte flips, and absurd sizes (huge, negative, zero) put in place of each printed dim.
//! Parsing and importing each must succeed or fail with an error that names the place
//! (`path:line:col`); none may panic, and none may take long (a size from the input that reaches
//! an allocation unchecked would).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ttpu_fx::ImportOptions;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The programs the corpus is made from: small models of each kind and every op case.
fn sources() -> Vec<(String, String)> {
    let mut names: Vec<String> = [
        "mlp",
        "cnn",
        "gpt2_block",
        "mlp_dynamic",
        "cnn_dynamic",
        "cond_branches",
        "data_while",
        "signature_variety",
        "buffer_mutation",
        "sequential_input",
        "derived_dim",
        "train_mlp",
    ]
    .iter()
    .map(|name| name.to_string())
    .collect();
    let mut cases: Vec<String> = std::fs::read_dir(fixtures().join("ops"))
        .expect("fixtures/ops")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("model.fx").is_file())
        .map(|entry| format!("ops/{}", entry.file_name().to_string_lossy()))
        .collect();
    cases.sort();
    names.extend(cases);
    names
        .into_iter()
        .map(|name| {
            let path = fixtures().join(&name).join("model.fx");
            let source = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{name}: {error}"));
            (format!("fixtures/{name}/model.fx"), source)
        })
        .collect()
}

/// Checks one variant; returns a problem, if any.
fn check(path: &str, variant: &str, source: &str) -> Option<String> {
    let start = Instant::now();
    // Only the message is read: keep the closure's result small (`ttpu_fx::Error` is large).
    let result = catch_unwind(AssertUnwindSafe(|| {
        ttpu_fx::load(source, path, &ImportOptions::default()).map(drop).map_err(|error| error.to_string())
    }));
    let elapsed = start.elapsed();
    if std::env::var_os("TTPU_MALFORMED_TRACE").is_some() {
        eprintln!("{elapsed:>12?} {path} ({variant})");
    }
    if elapsed > Duration::from_secs(5) {
        return Some(format!("{path} ({variant}): took {elapsed:?}"));
    }
    match result {
        Err(_) => Some(format!("{path} ({variant}): panicked")),
        Ok(Ok(_)) => None,
        Ok(Err(message)) => {
            // Every error names the file and a line and column in it.
            let located = message
                .strip_prefix(path)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|rest| rest.split(':').take(2).all(|part| part.parse::<usize>().is_ok()));
            (!located).then(|| format!("{path} ({variant}): error without a location: {message}"))
        }
    }
}

fn run(variants: impl Iterator<Item = (String, String, String)>) {
    // Panics are expected to be caught here; keep their messages out of the test's output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut problems = vec![];
    let mut count = 0;
    for (path, variant, source) in variants {
        count += 1;
        problems.extend(check(&path, &variant, &source));
    }
    std::panic::set_hook(hook);
    assert!(count > 1000, "the corpus shrank to {count} variants");
    assert!(
        problems.is_empty(),
        "{} of {count} malformed programs misbehave:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_line_cut_off_or_removed() {
    run(sources().into_iter().flat_map(|(path, source)| {
        let lines: Vec<String> = source.lines().map(str::to_owned).collect();
        (0..lines.len()).flat_map(move |line| {
            let cut = lines[..line].join("\n");
            let removed = lines.iter().enumerate().filter(|(index, _)| *index != line).map(|(_, text)| text.as_str());
            let removed = removed.collect::<Vec<_>>().join("\n");
            [
                (path.clone(), format!("cut before line {}", line + 1), cut),
                (path.clone(), format!("line {} removed", line + 1), removed),
            ]
        })
    }));
}

/// A small deterministic generator (SplitMix64), so a failure names a reproducible variant.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn seeded_byte_flips() {
    // Replacements that keep the text plausible: digits, signs, brackets, quotes, separators.
    const BYTES: &[u8] = b"0123456789-+[](){}<>\"',:=._ sfiuxe\n";
    run(sources().into_iter().flat_map(|(path, source)| {
        let mut state = source.len() as u64;
        (0..40).map(move |flip| {
            let mut bytes = source.clone().into_bytes();
            for _ in 0..=(flip % 3) {
                let at = (splitmix(&mut state) % bytes.len() as u64) as usize;
                bytes[at] = BYTES[(splitmix(&mut state) % BYTES.len() as u64) as usize];
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            (path.clone(), format!("flip {flip}"), text)
        })
    }));
}

#[test]
fn absurd_sizes_in_every_annotation() {
    const SIZES: [&str; 5] = ["0", "-3", "4611686018427387904", "9223372036854775807", "99999999999"];
    run(sources().into_iter().flat_map(|(path, source)| {
        // Each number inside a tensor annotation (`"f32[4, 16]"`), replaced in turn.
        let mut spots = vec![];
        let mut in_annotation = false;
        let bytes = source.as_bytes();
        let mut index = 0;
        while index < bytes.len() {
            match bytes[index] {
                b'[' if index > 0 && bytes[index - 1].is_ascii_digit() => in_annotation = true,
                b']' => in_annotation = false,
                b'0'..=b'9' if in_annotation => {
                    let end = (index..bytes.len()).find(|&at| !bytes[at].is_ascii_digit()).unwrap_or(bytes.len());
                    if index == 0 || !bytes[index - 1].is_ascii_alphanumeric() {
                        spots.push((index, end));
                    }
                    index = end;
                    continue;
                }
                _ => {}
            }
            index += 1;
        }
        // Every spot of small programs; an even sample of large ones.
        let step = spots.len().div_ceil(60).max(1);
        spots.into_iter().step_by(step).enumerate().flat_map(move |(which, (start, end))| {
            let source = source.clone();
            let path = path.clone();
            SIZES.iter().map(move |size| {
                let text = format!("{}{size}{}", &source[..start], &source[end..]);
                (path.clone(), format!("dim {which} = {size}"), text)
            })
        })
    }));
}
