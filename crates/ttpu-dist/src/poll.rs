//! Waiting for a key: polls a store's `try_get` until the key is there or the timeout has
//! passed. The first polls are 1 ms apart, then the interval doubles up to 50 ms, so a key that
//! arrives soon is seen soon and a long wait costs little.

use std::time::{Duration, Instant};

use ttpu_runtime::KvError;

/// The longest sleep between two polls.
const MAX_INTERVAL: Duration = Duration::from_millis(50);

/// Polls `try_get` for `key` until it gives a value or `timeout` has passed
/// ([`KvError::Timeout`], naming `store`). A store error ends the wait at once.
pub(crate) fn wait_for(
    key: &str,
    timeout: Duration,
    store: &str,
    mut try_get: impl FnMut() -> Result<Option<Vec<u8>>, KvError>,
) -> Result<Vec<u8>, KvError> {
    let start = Instant::now();
    let mut interval = Duration::from_millis(1);
    loop {
        if let Some(value) = try_get()? {
            return Ok(value);
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(KvError::Timeout { key: key.to_owned(), waited: timeout, store: store.to_owned() });
        }
        std::thread::sleep(interval.min(timeout - waited));
        interval = (interval * 2).min(MAX_INTERVAL);
    }
}
