//! The data-driven test harness shared by ttpu's IR crates (`ttpu-ir`, `ttpu-fuse`), in the
//! manner of Cranelift's filetests: every file of a directory is one case, and the case carries
//! its own expected output.
//!
//! A file is a `; test KIND` header, then `;` lines before the body (`; set NAME=VALUE` settings,
//! anything else a description), the body, and an `; expected:` line starting the expected output,
//! verbatim up to the end of the file:
//!
//! ```text
//! ; test roundtrip
//! ; what the case is about
//! graph @main(%0: f32[2] "x") -> (f32[2]) {
//!   return %0
//! }
//! ; expected:
//! graph @main(%0: f32[2] "x") -> (f32[2]) {
//!   return %0
//! }
//! ```
//!
//! What a kind means (and which settings it takes) is the calling test's business: it maps a
//! [`Case`] to its actual output. With `TTPU_BLESS=1` in the environment, mismatching (or missing)
//! expected blocks are rewritten from the actual output instead of failing.

use std::path::{Path, PathBuf};

/// The line that starts the expected output.
const EXPECTED: &str = "; expected:\n";

/// One parsed case file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The word after `; test `.
    pub kind: String,
    /// `; set NAME=VALUE` lines before the body, as `(NAME, VALUE)` in file order.
    pub settings: Vec<(String, String)>,
    /// The text between the leading `;` lines and the expected block.
    pub body: String,
    /// Everything before the expected block, kept when blessing.
    head: String,
    /// The expected output, if the file has one.
    pub expected: Option<String>,
}

impl Case {
    /// Parses a case file's contents.
    pub fn parse(contents: &str) -> Result<Case, String> {
        let header = contents.lines().next().ok_or("empty file")?;
        let kind = header
            .strip_prefix("; test ")
            .ok_or_else(|| format!("the first line must be `; test KIND`, found `{header}`"))?
            .to_owned();
        // The expected block starts at a line start, never inside a line.
        let (head, expected) = match contents.find(EXPECTED) {
            Some(at) if at == 0 || contents[..at].ends_with('\n') => {
                (contents[..at].to_owned(), Some(contents[at + EXPECTED.len()..].to_owned()))
            }
            _ => (if contents.ends_with('\n') { contents.to_owned() } else { format!("{contents}\n") }, None),
        };
        let mut settings = Vec::new();
        let mut body = String::new();
        for line in head.split_inclusive('\n').skip(1) {
            if !body.is_empty() || !line.starts_with(';') {
                body.push_str(line);
            } else if let Some(setting) = line.trim_end().strip_prefix("; set ") {
                let (name, value) = setting
                    .split_once('=')
                    .ok_or_else(|| format!("a setting is `; set NAME=VALUE`, found `{setting}`"))?;
                settings.push((name.trim().to_owned(), value.trim().to_owned()));
            }
        }
        Ok(Case { kind, settings, body, head, expected })
    }

    /// The value of setting `name`, if the file sets it.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().rev().find(|(setting, _)| setting == name).map(|(_, value)| value.as_str())
    }
}

/// The case files with extension `extension` in `dir`, sorted by name.
pub fn files(dir: &Path, extension: &str) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|error| format!("{}: {error}", dir.display()))?.path();
        if path.extension().is_some_and(|ext| ext == extension) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Checks one case file: `run` gives the actual output, which must equal the expected block
/// (or replaces it when `bless` is set). A `run` error fails the case as it is.
pub fn check(path: &Path, bless: bool, run: impl Fn(&Case) -> Result<String, String>) -> Result<(), String> {
    let contents = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let case = Case::parse(&contents)?;
    let actual = run(&case)?;
    if case.expected.as_deref() == Some(actual.as_str()) {
        return Ok(());
    }
    if bless {
        return std::fs::write(path, format!("{}{EXPECTED}{actual}", case.head)).map_err(|error| error.to_string());
    }
    match case.expected {
        None => Err(format!("no `; expected:` block; the output is\n{actual}")),
        Some(expected) => Err(format!("expected\n{expected}\nfound\n{actual}")),
    }
}

/// Checks every `*.extension` case in `dir` with `run`, blessing when `TTPU_BLESS=1`, and
/// returns one message listing every failing file (or `Ok` when all pass). A directory without
/// cases is an error, so a misplaced directory cannot pass silently.
pub fn check_dir(dir: &Path, extension: &str, run: impl Fn(&Case) -> Result<String, String>) -> Result<(), String> {
    let bless = std::env::var_os("TTPU_BLESS").is_some_and(|value| value == "1");
    let files = files(dir, extension)?;
    if files.is_empty() {
        return Err(format!("no `*.{extension}` filetests in {}", dir.display()));
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| check(path, bless, &run).err().map(|error| format!("{}: {error}", path.display())))
        .collect();
    if failures.is_empty() {
        return Ok(());
    }
    Err(format!("{} of {} filetests failed:\n\n{}", failures.len(), files.len(), failures.join("\n\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_splits_into_kind_settings_body_and_expected_output() {
        let case = Case::parse(
            "; test fuse\n; set fast_math=true\n; about the case\ngraph body\n; not a comment here\n; expected:\nout\n",
        )
        .unwrap();
        assert_eq!(case.kind, "fuse");
        assert_eq!(case.setting("fast_math"), Some("true"));
        assert_eq!(case.setting("other"), None);
        assert_eq!(case.body, "graph body\n; not a comment here\n");
        assert_eq!(case.expected.as_deref(), Some("out\n"));
    }

    #[test]
    fn malformed_files_say_what_is_wrong() {
        assert_eq!(Case::parse("").unwrap_err(), "empty file");
        assert_eq!(Case::parse("graph\n").unwrap_err(), "the first line must be `; test KIND`, found `graph`");
        assert_eq!(
            Case::parse("; test fuse\n; set fast_math\nbody\n").unwrap_err(),
            "a setting is `; set NAME=VALUE`, found `fast_math`"
        );
        let case = Case::parse("; test verify\nbody; expected:\n").unwrap();
        assert_eq!((case.body.as_str(), case.expected), ("body; expected:\n", None), "only a line start counts");
    }

    #[test]
    fn blessing_writes_the_actual_output_after_the_head() {
        let dir = std::env::temp_dir().join(format!("ttpu-filetest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("case.ttir");
        std::fs::write(&path, "; test echo\n; about\nhello\n; expected:\nstale\n").unwrap();
        let echo = |case: &Case| Ok(case.body.to_uppercase());
        assert_eq!(check(&path, false, echo).unwrap_err(), "expected\nstale\n\nfound\nHELLO\n");
        check(&path, true, echo).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "; test echo\n; about\nhello\n; expected:\nHELLO\n");
        check(&path, false, echo).unwrap();
        assert_eq!(check_dir(&dir, "none", echo).unwrap_err(), format!("no `*.none` filetests in {}", dir.display()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
