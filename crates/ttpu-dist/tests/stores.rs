//! The store suite, run on every backend: values round-trip byte for byte, a missing key is
//! `None` at once and a timeout naming the key when waited for, a key put later by another
//! thread is seen, concurrent writers of one key leave one writer's whole value (readers never
//! see a mix), and a torn write is never read. The Redis backend runs against a `redis-server`
//! the test starts on a free loopback port (`cargo xtask setup` installs Debian's).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ttpu_dist::{FileStore, KvError, KvStore, Prefixed, RedisStore, open_store};

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ttpu-dist-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn suite(store: &Arc<dyn KvStore>, address: &str) {
    let binary: Vec<u8> = (0..=255u8).chain([0, 0, 10, 13]).collect();
    store.put("cuda:local_topology/cuda/0", &binary).expect("put");
    assert_eq!(store.try_get("cuda:local_topology/cuda/0").expect("try_get"), Some(binary.clone()));
    assert_eq!(store.get("cuda:local_topology/cuda/0", Duration::from_secs(5)).expect("get"), binary);
    store.put("cuda:local_topology/cuda/0", b"replaced").expect("overwrite");
    assert_eq!(store.try_get("cuda:local_topology/cuda/0").expect("try_get"), Some(b"replaced".to_vec()));
    store.put("", b"").expect("empty key and value");
    assert_eq!(store.try_get("").expect("try_get"), Some(Vec::new()));

    // Missing keys.
    assert_eq!(store.try_get("never/put").expect("try_get"), None);
    let error = store.get("never/put", Duration::from_millis(30)).expect_err("a timeout");
    assert!(matches!(error, KvError::Timeout { .. }), "{error:?}");
    assert_eq!(error.to_string(), format!("timed out after 30ms waiting for key `never/put` in {address}"));

    // A key another thread puts later is seen by a waiting get.
    let writer = {
        let store = Arc::clone(store);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            store.put("late", b"here").expect("put");
        })
    };
    assert_eq!(store.get("late", Duration::from_secs(30)).expect("the late key"), b"here");
    writer.join().expect("the writer");

    // Concurrent writers of one key: every read is one writer's whole value.
    const SIZE: usize = 64 * 1024;
    let writers: Vec<_> = (1..=4u8)
        .map(|byte| {
            let store = Arc::clone(store);
            std::thread::spawn(move || {
                for _ in 0..20 {
                    store.put("contended", &vec![byte; SIZE]).expect("put");
                }
            })
        })
        .collect();
    let mut reads = 0;
    while writers.iter().any(|writer| !writer.is_finished()) || reads == 0 {
        if let Some(value) = store.try_get("contended").expect("try_get") {
            assert_eq!(value.len(), SIZE, "a whole value");
            assert!(value.iter().all(|&byte| byte == value[0]) && (1..=4).contains(&value[0]), "one writer's value");
            reads += 1;
        }
    }
    for writer in writers {
        writer.join().expect("a writer");
    }

    // Jobs that share a store see their own keys only.
    let job_a: Arc<dyn KvStore> = Arc::new(Prefixed::new(Arc::clone(store), "job-a"));
    let job_b: Arc<dyn KvStore> = Arc::new(Prefixed::new(Arc::clone(store), "job-b"));
    job_a.put("ttpu/devices/0", b"a").expect("put");
    assert_eq!(job_b.try_get("ttpu/devices/0").expect("try_get"), None);
    assert_eq!(store.try_get("job-a/ttpu/devices/0").expect("try_get"), Some(b"a".to_vec()));
}

#[test]
fn file_store_passes_the_suite_and_never_reads_a_torn_write() {
    let dir = TempDir::new("file");
    let address = format!("file://{}", dir.0.display());
    let store = open_store(&address).expect("opens");
    suite(&store, &address);

    // A writer that died mid-write leaves a temporary file: never read as the key's value.
    let files: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("listable")
        .map(|entry| entry.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.iter().all(|name| name.ends_with(".value")), "no temporary file is left behind: {files:?}");
    std::fs::write(dir.0.join(".tmp-99999-0"), b"half a val").expect("a torn write");
    std::fs::write(dir.0.join("torn"), b"half a val").expect("a stray file");
    assert_eq!(store.try_get("torn").expect("try_get"), None);
    assert!(matches!(store.get("torn", Duration::from_millis(10)), Err(KvError::Timeout { .. })));
    store.put("torn", b"whole value").expect("put");
    assert_eq!(store.try_get("torn").expect("try_get"), Some(b"whole value".to_vec()));

    // A directory that cannot be made is an error naming it.
    let blocked = dir.0.join("a-file");
    std::fs::write(&blocked, b"").expect("a file");
    let error = FileStore::open(&blocked.join("store")).expect_err("a file on the way");
    assert!(
        error.to_string().starts_with(&format!("file://{}/store: cannot create the directory: ", blocked.display())),
        "{error}"
    );
}

/// A `redis-server` on a free loopback port, stopped on drop.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = free_port();
        let dir = TempDir::new("redis");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start redis-server ({error}): run `cargo xtask setup`, which installs Debian's redis-server"
                )
            });
        let mut server = RedisServer { child, port, _dir: dir };
        // Wait (boundedly) until it accepts connections; the bound only guards against a server
        // that never comes up, it decides no result.
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("redis-server exited at start-up: {status}");
            }
            assert!(start.elapsed() < Duration::from_secs(60), "redis-server did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn address(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).expect("a free port").local_addr().expect("its address").port()
}

#[test]
fn redis_store_passes_the_suite() {
    let server = RedisServer::start();
    let address = server.address();
    let store = open_store(&address).expect("connects");
    suite(&store, &address);

    // A server that goes away: an error naming the store, never a hang.
    drop(server);
    let error = store.put("after", b"x").expect_err("no server");
    assert!(matches!(error, KvError::Backend { .. }), "{error:?}");
    assert!(error.to_string().starts_with(&format!("{address}: ")), "{error}");
    let port = free_port();
    let error = RedisStore::open(&format!("redis://127.0.0.1:{port}")).expect_err("nothing listens");
    assert!(error.to_string().starts_with(&format!("redis://127.0.0.1:{port}: cannot connect: ")), "{error}");
}
