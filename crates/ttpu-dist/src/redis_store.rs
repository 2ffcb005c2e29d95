//! A key-value store on a Redis server (`redis://host:port[/db]`), for jobs across hosts.
//!
//! A put is `SET`, a try-get `GET`; a get polls `GET` until its timeout. One connection is kept
//! and shared by every thread (commands are short; waits sleep without holding it), opened again
//! after a failure. Every command is bounded by [`IO_TIMEOUT`], so a server that stops answering
//! ends in an error instead of a hang.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ttpu_runtime::{KvError, KvStore};

use crate::poll::wait_for;

/// The longest a connect, a read or a write on the server may take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`KvStore`] on a Redis server.
pub struct RedisStore {
    client: redis::Client,
    connection: Mutex<Option<redis::Connection>>,
    address: String,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("address", &self.address).finish_non_exhaustive()
    }
}

fn backend(address: &str, what: &str, error: redis::RedisError) -> KvError {
    KvError::Backend { store: address.to_owned(), message: format!("{what}: {error}"), source: Some(Box::new(error)) }
}

impl RedisStore {
    /// The store on the server at `url` (`redis://host:port[/db]`); connects once to check
    /// that the server answers.
    pub fn open(url: &str) -> Result<RedisStore, KvError> {
        let client = redis::Client::open(url).map_err(|error| backend(url, "not a Redis address", error))?;
        let store = RedisStore { client, connection: Mutex::new(None), address: url.to_owned() };
        store.command("connecting", |connection| redis::cmd("PING").query::<String>(connection).map(drop))?;
        Ok(store)
    }

    /// Runs `body` on the shared connection (opened if there is none), dropping the connection
    /// after a failure so the next command opens a new one.
    fn command<T>(
        &self,
        what: &str,
        body: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, KvError> {
        // A panic inside `body` leaves at worst a connection mid-command, which the error path
        // below would drop anyway; the lock itself stays usable.
        let mut slot = self.connection.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            let connection = self
                .client
                .get_connection_with_timeout(IO_TIMEOUT)
                .and_then(|connection| {
                    connection.set_read_timeout(Some(IO_TIMEOUT))?;
                    connection.set_write_timeout(Some(IO_TIMEOUT))?;
                    Ok(connection)
                })
                .map_err(|error| backend(&self.address, "cannot connect", error))?;
            *slot = Some(connection);
        }
        let connection = slot.as_mut().expect("a connection was just put in the slot");
        body(connection).map_err(|error| {
            *slot = None;
            backend(&self.address, what, error)
        })
    }
}

impl KvStore for RedisStore {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.command(&format!("cannot write key `{key}`"), |connection| {
            redis::cmd("SET").arg(key).arg(value).query::<()>(connection)
        })
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        wait_for(key, timeout, &self.address, || self.try_get(key))
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.command(&format!("cannot read key `{key}`"), |connection| {
            redis::cmd("GET").arg(key).query::<Option<Vec<u8>>>(connection)
        })
    }
}
