//! What tests need of the API: its state over the embedded adapters, as
//! `trawl run` has them (SQLite in memory, the in-process queue and events, a
//! SQLite content cache in a folder of its own).

use std::sync::Arc;

use tempfile::TempDir;
use tokio::sync::mpsc::UnboundedReceiver;
use trawl_cache::SqliteCache;
use trawl_core::cost::PriceTable;
use trawl_core::ports::{ContentCache, Event};
use trawl_queue::{EmbeddedQueue, InProcessEvents, QueueConfig};
use trawl_store::SqliteStore;

use crate::{ApiState, Auth};

/// An [`ApiState`] over embedded adapters, with the handles a test reads
/// behind the API's back. The folder lives as long as this value.
pub struct EmbeddedApi {
    /// The state, default prices and limits; change it with its `with_*`.
    pub state: ApiState,
    pub store: Arc<SqliteStore>,
    pub queue: Arc<EmbeddedQueue>,
    /// What the API emitted.
    pub events: UnboundedReceiver<Event>,
    /// Holds the cache file.
    pub dir: TempDir,
}

impl EmbeddedApi {
    /// The API behind `auth`, with a SQLite content cache.
    pub async fn new(auth: Auth) -> anyhow::Result<EmbeddedApi> {
        EmbeddedApi::with_cache(auth, None).await
    }

    /// The API behind `auth`, with `cache` (a SQLite one when `None`).
    pub async fn with_cache(
        auth: Auth,
        cache: Option<Arc<dyn ContentCache>>,
    ) -> anyhow::Result<EmbeddedApi> {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SqliteStore::memory().await?);
        let queue = Arc::new(EmbeddedQueue::new(QueueConfig::default()));
        let (port, events) = InProcessEvents::channel();
        let cache = match cache {
            Some(c) => c,
            None => Arc::new(SqliteCache::open(&dir.path().join("cache.db")).await?),
        };
        let state = ApiState::new(
            store.clone(),
            Arc::new(port),
            queue.clone(),
            cache,
            PriceTable::default(),
            auth,
        );
        Ok(EmbeddedApi {
            state,
            store,
            queue,
            events,
            dir,
        })
    }
}
