//! A key-value store in a directory every process of a job can read and write: one host's
//! temporary directory (what `ttpu launch` makes), or a shared file system across hosts.
//!
//! Each key is one file, `<encoded key>.value`, whose name escapes every byte outside
//! `[A-Za-z0-9_-]` as `%XX`, so any key maps to one flat name and no key reaches outside the
//! directory. A put writes a temporary file (`.tmp-...`, a name no key maps to), flushes it to
//! disk and renames it over the key's file: a reader sees the whole old value or the whole new
//! one, never a torn write, and concurrent writers of one key leave one writer's whole value.
//! A get polls for the file until its timeout.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ttpu_runtime::{KvError, KvStore};

use crate::poll::wait_for;

/// Distinguishes the temporary files of one process's concurrent writers.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The extension of the files that hold values; nothing else in the directory is read.
const EXTENSION: &str = "value";

/// A [`KvStore`] in a directory (`file:///path`).
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    /// `file://` and the directory, as errors name the store.
    address: String,
}

impl FileStore {
    /// The store in `dir`, created (with its parents) if missing.
    pub fn open(dir: &Path) -> Result<FileStore, KvError> {
        let address = format!("file://{}", dir.display());
        fs::create_dir_all(dir).map_err(|source| backend(&address, "cannot create the directory", source))?;
        Ok(FileStore { dir: dir.to_owned(), address })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.{EXTENSION}", encode_key(key)))
    }
}

/// `key` as one file name: `[A-Za-z0-9_-]` kept, every other byte `%XX` (so `.` and `/` never
/// appear, and no name starts with the `.tmp-` of temporary files).
fn encode_key(key: &str) -> String {
    let mut name = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

fn backend(store: &str, what: &str, source: std::io::Error) -> KvError {
    KvError::Backend { store: store.to_owned(), message: format!("{what}: {source}"), source: Some(Box::new(source)) }
}

impl KvStore for FileStore {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        let target = self.path(key);
        let counter = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!(".tmp-{}-{counter}", std::process::id()));
        let written = fs::File::create(&temp).and_then(|mut file| {
            file.write_all(value)?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| fs::rename(&temp, &target));
        if let Err(error) = renamed {
            let _ = fs::remove_file(&temp);
            return Err(backend(&self.address, &format!("cannot write key `{key}`"), error));
        }
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        wait_for(key, timeout, &self.address, || self.try_get(key))
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        match fs::read(self.path(key)) {
            Ok(value) => Ok(Some(value)),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(error) => Err(backend(&self.address, &format!("cannot read key `{key}`"), error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_flat_names_that_no_temporary_file_takes() {
        assert_eq!(encode_key("ttpu/devices/1"), "ttpu%2Fdevices%2F1");
        assert_eq!(encode_key("cuda:local_topology/cuda/0"), "cuda%3Alocal_topology%2Fcuda%2F0");
        assert_eq!(encode_key("../etc"), "%2E%2E%2Fetc");
        assert_eq!(encode_key(".tmp-1-2"), "%2Etmp-1-2");
        assert_eq!(encode_key("é"), "%C3%A9");
        assert_eq!(encode_key(""), "");
    }
}
