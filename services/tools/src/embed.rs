//! [`Embeddings`]: the tool layer's sentence embeddings, one service for the
//! guard's semantic poisoning detector and the dense half of tool search.
//!
//! A vector is looked up, in order: in a bounded in-process map (a warm call
//! touches neither the model nor the store), in the store (vectors computed by any
//! process of the deployment, or before a restart), and only then computed by the
//! model, on a blocking thread; what was computed is saved to the store. Keys are
//! the sha256 of the text, scoped in the store by the weights'
//! [`Embedder::model_id`], so other weights never serve a cached vector.
//!
//! The store is a cache here: when it cannot be read or written the vectors are
//! computed all the same, with a warning.
//!
//! Built from the setting `TRAWL_EMBED_MODEL` (a model folder); without it there
//! is no such service: the detector that needs it is off, and tool search is
//! lexical only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use hashlink::LruCache;
use sha2::{Digest, Sha256};
use trawl_core::ports::Store;
use trawl_embed::{EmbedError, Embedder};

/// Vectors kept in the process by default: 16,384 of 384 floats are 25 MiB.
pub const MEMO_VECTORS: usize = 16_384;

/// A vector, shared: the map and every caller hold the same floats.
pub type Vector = Arc<[f32]>;

/// Why vectors could not be had.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingsError {
    /// The model failed on these texts.
    #[error(transparent)]
    Model(#[from] EmbedError),
    /// The blocking task running the model panicked or was cancelled.
    #[error("the embedding task did not finish: {0}")]
    Task(String),
    /// A bug: fewer vectors than texts.
    #[error("{got} vectors for {asked} texts")]
    Count { asked: usize, got: usize },
}

/// Sentence vectors for the tool layer, cached in the process and in the store.
pub struct Embeddings {
    embedder: Arc<Embedder>,
    store: Option<Arc<dyn Store>>,
    memo: Mutex<LruCache<String, Vector>>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("model_id", &self.embedder.model_id())
            .field("store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Embeddings {
    /// Over a loaded model, caching in `store` when given.
    pub fn new(embedder: Arc<Embedder>, store: Option<Arc<dyn Store>>) -> Embeddings {
        Embeddings {
            embedder,
            store,
            memo: Mutex::new(LruCache::new(MEMO_VECTORS)),
        }
    }

    /// Keeps at most `vectors` in the process (the least recently used go first).
    pub fn with_memo_capacity(self, vectors: usize) -> Embeddings {
        Embeddings {
            memo: Mutex::new(LruCache::new(vectors.max(1))),
            ..self
        }
    }

    /// Loads the model in `dir` (on a blocking thread: it reads and hashes about
    /// 90 MB) and caches in `store` when given.
    pub async fn load(
        dir: &Path,
        store: Option<Arc<dyn Store>>,
    ) -> Result<Embeddings, EmbeddingsError> {
        let dir = dir.to_owned();
        let embedder = tokio::task::spawn_blocking(move || Embedder::load(&dir))
            .await
            .map_err(|e| EmbeddingsError::Task(e.to_string()))??;
        Ok(Embeddings::new(Arc::new(embedder), store))
    }

    /// The model behind the vectors.
    pub fn embedder(&self) -> &Arc<Embedder> {
        &self.embedder
    }

    /// One unit vector per text, in order (see [`trawl_embed::cosine`]).
    pub async fn vectors(&self, texts: &[String]) -> Result<Vec<Vector>, EmbeddingsError> {
        let keys: Vec<String> = texts.iter().map(|t| key(t)).collect();
        let mut found: HashMap<String, Vector> = HashMap::new();
        // Texts not in the map, once each, by key.
        let mut missing: BTreeMap<String, &String> = BTreeMap::new();
        {
            let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
            for (k, t) in keys.iter().zip(texts) {
                if found.contains_key(k) || missing.contains_key(k) {
                    continue;
                }
                match memo.get(k) {
                    Some(v) => {
                        found.insert(k.clone(), v.clone());
                    }
                    None => {
                        missing.insert(k.clone(), t);
                    }
                }
            }
        }
        if missing.is_empty() {
            return assemble(&keys, &found);
        }

        let model = self.embedder.model_id();
        let mut fresh: Vec<(String, Vector)> = Vec::new();
        if let Some(store) = &self.store {
            let asked: Vec<String> = missing.keys().cloned().collect();
            match store.embeddings(model, &asked).await {
                Ok(rows) => {
                    for (k, v) in rows {
                        if v.len() != self.embedder.dims() {
                            tracing::warn!(
                                key = k,
                                len = v.len(),
                                "a stored embedding of the wrong length is ignored"
                            );
                        } else if missing.remove(&k).is_some() {
                            fresh.push((k, v.into()));
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "embeddings not read from the store"),
            }
        }

        if !missing.is_empty() {
            let (asked, owned): (Vec<String>, Vec<String>) =
                missing.into_iter().map(|(k, t)| (k, t.clone())).unzip();
            let embedder = self.embedder.clone();
            let computed = tokio::task::spawn_blocking(move || {
                let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
                embedder.embed(&refs)
            })
            .await
            .map_err(|e| EmbeddingsError::Task(e.to_string()))??;
            if computed.len() != asked.len() {
                return Err(EmbeddingsError::Count {
                    asked: asked.len(),
                    got: computed.len(),
                });
            }
            let rows: Vec<(String, Vec<f32>)> = asked.into_iter().zip(computed).collect();
            if let Some(store) = &self.store
                && let Err(e) = store.save_embeddings(model, &rows).await
            {
                tracing::warn!(error = %e, rows = rows.len(), "embeddings not saved to the store");
            }
            fresh.extend(rows.into_iter().map(|(k, v)| (k, v.into())));
        }

        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in fresh {
            memo.insert(k.clone(), v.clone());
            found.insert(k, v);
        }
        drop(memo);
        assemble(&keys, &found)
    }
}

impl Embeddings {
    /// The vector of a search query: from the process's map or the model's int8
    /// path ([`Embedder::embed_quick`]), never the store (queries are many and
    /// seldom repeated across processes; a store round trip would cost more than
    /// the model on a short text). Query vectors have keys of their own in the
    /// map, so a query that reads like a tool's text never gets its f32 vector.
    pub async fn query(&self, text: &str) -> Result<Vector, EmbeddingsError> {
        let k = format!("query:{}", key(text));
        if let Some(v) = self
            .memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&k)
            .cloned()
        {
            return Ok(v);
        }
        let embedder = self.embedder.clone();
        let owned = text.to_owned();
        let v: Vector = tokio::task::spawn_blocking(move || embedder.embed_quick(&owned))
            .await
            .map_err(|e| EmbeddingsError::Task(e.to_string()))??
            .into();
        self.memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(k, v.clone());
        Ok(v)
    }
}

/// The cache key of a text: the hex sha256 of its UTF-8 bytes.
pub fn key(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn assemble(
    keys: &[String],
    found: &HashMap<String, Vector>,
) -> Result<Vec<Vector>, EmbeddingsError> {
    keys.iter()
        .map(|k| {
            found.get(k).cloned().ok_or(EmbeddingsError::Count {
                asked: keys.len(),
                got: found.len(),
            })
        })
        .collect()
}
