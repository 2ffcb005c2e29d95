//! The compile cache: executables keyed by the structure of the graph they run.
//!
//! The key ([`cache_key`]) is canonical text: input types, then every node's op with all its
//! attributes and constant bytes and its operands numbered densely (inputs first, then results in
//! node order, as the IR printer numbers them), then the outputs. It captures ops, attributes,
//! shapes and dtypes and nothing about input values; result types follow from those by
//! inference. The whole text is the key, so two graphs never share an entry by a hash collision.
//! It is built without the IR printer's per-value allocations because a warm DeferAndFuse read
//! pays for it on every materialization.
//!
//! In memory the cache keeps at most `capacity` executables and evicts the least recently used.
//! On disk (optional) each entry is one file written to a temporary name and renamed into place,
//! so readers see a whole file or none; the file repeats the key and carries a checksum, and an
//! entry that is torn, stale or for another key is ignored and recompiled, never trusted.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::fmt::Write;

use ttpu_ir::Graph;
use ttpu_pjrt::{Client, LoadedExecutable};

/// First bytes of a disk entry; the digit changes whenever the layout does.
const MAGIC: &[u8; 8] = b"TTPUEXE1";

/// Executables by graph text, least recently used evicted first.
pub(crate) struct CompileCache {
    capacity: usize,
    entries: HashMap<String, Entry>,
    tick: u64,
    disk: Option<DiskCache>,
}

struct Entry {
    executable: Arc<LoadedExecutable>,
    last_used: u64,
}

impl CompileCache {
    pub(crate) fn new(capacity: usize) -> CompileCache {
        CompileCache { capacity, entries: HashMap::new(), tick: 0, disk: None }
    }

    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict();
    }

    pub(crate) fn set_disk(&mut self, disk: Option<DiskCache>) {
        self.disk = disk;
    }

    pub(crate) fn disk(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<Arc<LoadedExecutable>> {
        self.tick += 1;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = self.tick;
        Some(Arc::clone(&entry.executable))
    }

    pub(crate) fn insert(&mut self, key: String, executable: Arc<LoadedExecutable>) {
        self.tick += 1;
        self.entries.insert(key, Entry { executable, last_used: self.tick });
        self.evict();
    }

    fn evict(&mut self) {
        // Eviction scans every entry; caches hold hundreds of graphs at most and a scan is far
        // cheaper than the compile that preceded it.
        while self.entries.len() > self.capacity {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, entry)| entry.last_used).map(|(key, _)| key.clone())
            else {
                return;
            };
            self.entries.remove(&oldest);
        }
    }
}

/// Serialized executables in a folder, one file per key.
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// Identifies the plugin build: serialized executables load only into the same one.
    platform: String,
}

/// Distinguishes temporary files of concurrent writers in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    pub(crate) fn new(dir: &Path, platform: String) -> std::io::Result<DiskCache> {
        fs::create_dir_all(dir)?;
        Ok(DiskCache { dir: dir.to_owned(), platform })
    }

    fn path(&self, key: &str) -> PathBuf {
        let name = format!("{:016x}.ttpuexe", fnv1a(&[self.platform.as_bytes(), b"\n", key.as_bytes()]));
        self.dir.join(name)
    }

    /// The executable stored for `key`, if a whole, matching entry exists and loads.
    pub(crate) fn load(&self, client: &Client, key: &str) -> Option<LoadedExecutable> {
        let bytes = fs::read(self.path(key)).ok()?;
        let payload = self.check(&bytes, key)?;
        match client.deserialize_executable(payload) {
            Ok(executable) => Some(executable),
            Err(error) => {
                tracing::warn!(%error, "ignoring a disk cache entry that does not load");
                None
            }
        }
    }

    /// The payload of `bytes` if it is an intact entry for `key` from this platform.
    fn check<'a>(&self, bytes: &'a [u8], key: &str) -> Option<&'a [u8]> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let (checksum, rest) = rest.split_first_chunk::<8>()?;
        if u64::from_le_bytes(*checksum) != fnv1a(&[rest]) {
            tracing::warn!("ignoring a torn or corrupt disk cache entry");
            return None;
        }
        let (header_len, rest) = rest.split_first_chunk::<8>()?;
        let header_len = usize::try_from(u64::from_le_bytes(*header_len)).ok()?;
        let (header, payload) = rest.split_at_checked(header_len)?;
        (header == self.header(key).as_bytes()).then_some(payload)
    }

    fn header(&self, key: &str) -> String {
        format!("{}\n{key}", self.platform)
    }

    /// Stores `executable` under `key`. Failures only cost a later recompile, so they are
    /// logged and dropped.
    pub(crate) fn store(&self, key: &str, executable: &LoadedExecutable) {
        let payload = match executable.serialize() {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(%error, "executable not serializable; not cached on disk");
                return;
            }
        };
        let header = self.header(key);
        let mut body = Vec::with_capacity(8 + header.len() + payload.len());
        body.extend_from_slice(&(header.len() as u64).to_le_bytes());
        body.extend_from_slice(header.as_bytes());
        body.extend_from_slice(&payload);
        let mut file = Vec::with_capacity(16 + body.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&fnv1a(&[&body]).to_le_bytes());
        file.extend_from_slice(&body);

        let path = self.path(key);
        let temp =
            path.with_extension(format!("tmp.{}.{}", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
        // Rename is atomic within a folder, so a reader never sees a half-written entry.
        let written = fs::write(&temp, &file).and_then(|()| fs::rename(&temp, &path));
        if let Err(error) = written {
            tracing::warn!(%error, path = %path.display(), "could not write disk cache entry");
            let _ = fs::remove_file(&temp);
        }
    }
}

/// 64-bit FNV-1a over the concatenation of `parts`: stable across Rust versions (unlike
/// `DefaultHasher`), which on-disk names and checksums need.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// The canonical structural text of `graph` (see the module docs).
pub(crate) fn cache_key(graph: &Graph) -> String {
    let mut numbers = vec![u32::MAX; graph.value_count()];
    let mut next = 0u32;
    let mut key = String::with_capacity(64 + 32 * graph.node_count());
    // Writing to a `String` cannot fail, so the `fmt::Result`s below are ignored.
    for &input in &graph.inputs {
        numbers[input.index_usize()] = next;
        next += 1;
        let _ = write!(key, "{};", graph.ty(input));
    }
    key.push('\n');
    for (_, node) in graph.nodes() {
        // `Op`'s derived `Debug` names the variant and every attribute, constant bytes included.
        let _ = write!(key, "{:?}(", node.op);
        for operand in &node.operands {
            let _ = write!(key, "{},", numbers[operand.index_usize()]);
        }
        key.push_str(")\n");
        for result in &node.results {
            numbers[result.index_usize()] = next;
            next += 1;
        }
    }
    key.push_str("return");
    for output in &graph.outputs {
        let _ = write!(key, " {}", numbers[output.index_usize()]);
    }
    key
}
