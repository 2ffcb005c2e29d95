//! The on-disk compile cache: serialized executables shared across processes.
//!
//! The key is everything that decides what the plugin builds: the exact StableHLO bytes, the
//! serialized compile options, and the plugin's identity (its platform name and version as PJRT
//! reports them, plus the plugin file's path, size and modification time), so one plugin never
//! loads another's executable. Each entry is one file named by a hash of the key, written to a
//! temporary name and renamed into place, so readers see a whole file or none. The file repeats
//! the whole key and carries a checksum; an entry that is torn, corrupt, stale or for another
//! key is ignored (and recompiled), never trusted. Loads refresh an entry's modification time,
//! and a store that takes the folder past its byte budget removes the least recently used
//! entries.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use ttpu_pjrt::{Client, LoadedExecutable};

/// First bytes of an entry; the digit changes whenever the layout does.
const MAGIC: &[u8; 8] = b"TTPUEXE2";

/// The extension of entry files; nothing else in the folder is touched.
const EXTENSION: &str = "ttpuexe";

/// The byte budget of a cache folder unless one is set: 2 GiB.
pub const DEFAULT_DISK_CACHE_BYTES: u64 = 2 << 30;

/// Serialized executables in a folder, one file per key.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// Identifies the plugin build: serialized executables load only into the same one.
    identity: String,
    max_bytes: u64,
}

/// Distinguishes temporary files of concurrent writers in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    pub(crate) fn new(dir: &Path, identity: String, max_bytes: u64) -> std::io::Result<DiskCache> {
        fs::create_dir_all(dir)?;
        Ok(DiskCache { dir: dir.to_owned(), identity, max_bytes })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The header every entry of `mlir` compiled with `options` repeats: the whole key.
    fn header(&self, mlir: &str, options: &[u8]) -> Vec<u8> {
        let mut header = Vec::with_capacity(self.identity.len() + 2 * options.len() + mlir.len() + 4);
        header.extend_from_slice(self.identity.as_bytes());
        header.push(b'\n');
        for byte in options {
            header.extend_from_slice(format!("{byte:02x}").as_bytes());
        }
        header.push(b'\n');
        header.extend_from_slice(mlir.as_bytes());
        header
    }

    fn path(&self, header: &[u8]) -> PathBuf {
        self.dir.join(format!("{:016x}.{EXTENSION}", fnv1a(&[header])))
    }

    /// The executable stored for `mlir` compiled with `options`, if a whole, matching entry
    /// exists and loads.
    pub(crate) fn load(&self, client: &Client, mlir: &str, options: &[u8]) -> Option<LoadedExecutable> {
        let header = self.header(mlir, options);
        let path = self.path(&header);
        let bytes = fs::read(&path).ok()?;
        let Some(payload) = check(&bytes, &header) else {
            tracing::warn!(path = %path.display(), "ignoring a torn, corrupt or foreign disk cache entry");
            return None;
        };
        match client.deserialize_executable(payload) {
            Ok(executable) => {
                // Recently used entries are the last to be evicted.
                if let Ok(file) = fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                Some(executable)
            }
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "ignoring a disk cache entry that does not load");
                None
            }
        }
    }

    /// Stores `executable` as compiled from `mlir` with `options`. Failures only cost a later
    /// recompile, so they are logged and dropped.
    pub(crate) fn store(&self, mlir: &str, options: &[u8], executable: &LoadedExecutable) {
        let payload = match executable.serialize() {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(%error, "executable not serializable; not cached on disk");
                return;
            }
        };
        let header = self.header(mlir, options);
        let file = entry_bytes(&header, &payload);
        let path = self.path(&header);
        let temp =
            path.with_extension(format!("tmp.{}.{}", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
        // Rename is atomic within a folder, so a reader never sees a half-written entry.
        let written = fs::File::create(&temp)
            .and_then(|mut out| out.write_all(&file).and_then(|()| out.sync_data()))
            .and_then(|()| fs::rename(&temp, &path));
        if let Err(error) = written {
            tracing::warn!(%error, path = %path.display(), "could not write disk cache entry");
            let _ = fs::remove_file(&temp);
            return;
        }
        self.evict(&path);
    }

    /// Removes the least recently used entries (by modification time) until the folder's
    /// entries fit the byte budget; `keep` (the entry just written) stays.
    fn evict(&self, keep: &Path) {
        let Ok(dir) = fs::read_dir(&self.dir) else { return };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = dir
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let path = entry.path();
                if path.extension().and_then(|ext| ext.to_str()) != Some(EXTENSION) {
                    return None;
                }
                let meta = entry.metadata().ok()?;
                Some((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), path))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).fold(0, |acc, size| acc.saturating_add(*size));
        if total <= self.max_bytes {
            return;
        }
        entries.sort();
        for (_, size, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if fs::remove_file(&path).is_ok() {
                tracing::debug!(path = %path.display(), size, "evicted a disk cache entry");
                total = total.saturating_sub(size);
            }
        }
    }
}

/// `MAGIC`, the checksum of the body, then the body: the header's length, the header, the
/// payload.
fn entry_bytes(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(8 + header.len() + payload.len());
    body.extend_from_slice(&(header.len() as u64).to_le_bytes());
    body.extend_from_slice(header);
    body.extend_from_slice(payload);
    let mut file = Vec::with_capacity(16 + body.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&fnv1a(&[&body]).to_le_bytes());
    file.extend_from_slice(&body);
    file
}

/// The payload of `bytes` if it is an intact entry whose header is `header`.
fn check<'a>(bytes: &'a [u8], header: &[u8]) -> Option<&'a [u8]> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (checksum, rest) = rest.split_first_chunk::<8>()?;
    if u64::from_le_bytes(*checksum) != fnv1a(&[rest]) {
        return None;
    }
    let (header_len, rest) = rest.split_first_chunk::<8>()?;
    let header_len = usize::try_from(u64::from_le_bytes(*header_len)).ok()?;
    let (stored, payload) = rest.split_at_checked(header_len)?;
    (stored == header && !payload.is_empty()).then_some(payload)
}

/// 64-bit FNV-1a over the concatenation of `parts`: stable across Rust versions (unlike
/// `DefaultHasher`), which on-disk names and checksums need.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// The identity of the plugin at `path` seen through `client`: platform name and version, and
/// the file's canonical path, size and modification time (a rebuilt or replaced plugin file gets
/// new entries).
pub(crate) fn plugin_identity(client: &Client, path: &Path) -> String {
    let platform = client.platform_name().unwrap_or_default();
    let version = client.platform_version().unwrap_or_default();
    let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let (size, modified) = fs::metadata(path)
        .map(|meta| {
            let modified = meta
                .modified()
                .ok()
                .and_then(|time| time.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |since| since.as_nanos());
            (meta.len(), modified)
        })
        .unwrap_or((0, 0));
    format!("{platform} {version} {} {size} {modified}", canonical.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_check_their_checksum_and_whole_key() {
        let header = b"cpu 0.115 /p 1 2\n0a\nmodule {}".to_vec();
        let file = entry_bytes(&header, b"payload");
        assert_eq!(check(&file, &header), Some(&b"payload"[..]));
        // Another key with the same file (a hash collision of names, or a foreign plugin).
        assert_eq!(check(&file, b"cpu 0.116 /p 1 2\n0a\nmodule {}"), None);
        // Torn: any prefix fails.
        for cut in [0, 8, 16, file.len() / 2, file.len() - 1] {
            assert_eq!(check(&file[..cut], &header), None, "cut at {cut}");
        }
        // One flipped bit anywhere fails.
        for index in [0, 9, 20, file.len() - 1] {
            let mut flipped = file.clone();
            flipped[index] ^= 0x10;
            assert_eq!(check(&flipped, &header), None, "flip at {index}");
        }
    }

    #[test]
    fn eviction_keeps_the_budget_and_the_newest_entry() {
        let dir = std::env::temp_dir().join(format!("ttpu-runtime-evict-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cache = DiskCache::new(&dir, "id".into(), 250).unwrap();
        let old = dir.join(format!("a.{EXTENSION}"));
        let newer = dir.join(format!("b.{EXTENSION}"));
        let newest = dir.join(format!("c.{EXTENSION}"));
        let other = dir.join("notes.txt");
        for (index, path) in [&old, &newer, &newest, &other].into_iter().enumerate() {
            fs::write(path, vec![0u8; 100]).unwrap();
            let file = fs::File::options().append(true).open(path).unwrap();
            file.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + index as u64)).unwrap();
        }
        cache.evict(&newest);
        assert!(!old.exists(), "the least recently used entry goes");
        assert!(newer.exists() && newest.exists(), "two entries fit 250 bytes");
        assert!(other.exists(), "files that are not entries stay");
        let _ = fs::remove_dir_all(&dir);
    }
}
