//! The same model with int8 matrix weights, for one short text at a time: the
//! search query, whose embedding is the whole latency of a search.
//!
//! A query of ten tokens is too short for the f32 matrix kernels to reuse what
//! they read: each pass streams the model's 10.6 M matrix weights (42 MB) once
//! per product. Here those weights are GGML `Q8_0` (blocks of 32 int8 values
//! with one f16 scale, about 14 MB with the padding below), quantized at load
//! from the same f32 tensors, and candle's quantized kernels run the products
//! (AVX-512 VNNI where the processor has it). Q, K and V are one product.
//! Everything else (the embeddings, shared with the f32 model, layer norms,
//! attention, pooling) is the f32 model's arithmetic.
//!
//! A vector from here is close to, not equal to, [`crate::Embedder::embed`]'s
//! vector of the same text (the tests bound the difference); it is still a
//! function of the text alone. Never mix the two in one cache.

use std::collections::HashMap;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Module, Tensor};
use candle_nn::LayerNorm;
use candle_transformers::models::bert::{Config, HiddenAct};
use candle_transformers::quantized_nn::Linear;

use crate::words::Embeddings;

/// candle's fastest int8 kernels (weights repacked for AVX-512 VNNI) take
/// inner dimensions in multiples of this; others fall back to a kernel several
/// times slower.
const INNER_MULTIPLE: usize = 256;

/// A matrix product with bias, its inner dimension padded with zeros to a
/// multiple of [`INNER_MULTIPLE`] (the padding adds nothing to any output).
struct Product {
    linear: Linear,
    pad: usize,
}

impl Product {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if self.pad == 0 {
            self.linear.forward(x)
        } else {
            self.linear.forward(&x.pad_with_zeros(1, 0, self.pad)?)
        }
    }
}

/// One encoder layer.
struct Layer {
    /// Q, K and V in one product: `hidden → 3 × hidden`.
    qkv: Product,
    out: Product,
    attention_norm: LayerNorm,
    up: Product,
    down: Product,
    output_norm: LayerNorm,
}

/// The quantized encoder.
pub(crate) struct Quick {
    layers: Vec<Layer>,
    heads: usize,
    head_size: usize,
    act: HiddenAct,
}

impl Quick {
    /// Builds the encoder from the f32 tensors of the weights file, named under
    /// `prefix` (`"bert."` or `""`; shared, not copied, for the norms).
    pub(crate) fn new(
        tensors: &HashMap<String, Tensor>,
        prefix: &str,
        config: &Config,
    ) -> candle_core::Result<Quick> {
        let get = |name: &str| {
            tensors
                .get(&format!("{prefix}{name}"))
                .cloned()
                .ok_or_else(|| candle_core::Error::Msg(format!("no tensor {prefix}{name}")))
        };
        let norm = |name: &str| -> candle_core::Result<LayerNorm> {
            Ok(LayerNorm::new(
                get(&format!("{name}.weight"))?,
                get(&format!("{name}.bias"))?,
                config.layer_norm_eps,
            ))
        };
        let linear = |names: &[&str]| -> candle_core::Result<Product> {
            let weights = names
                .iter()
                .map(|n| get(&format!("{n}.weight")))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let biases = names
                .iter()
                .map(|n| get(&format!("{n}.bias")))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let weight = Tensor::cat(&weights, 0)?;
            let inner = weight.dim(1)?;
            let pad = inner.next_multiple_of(INNER_MULTIPLE) - inner;
            let weight = QTensor::quantize(&weight.pad_with_zeros(1, 0, pad)?, GgmlDType::Q8_0)?;
            Ok(Product {
                linear: Linear::from_arc(
                    std::sync::Arc::new(weight),
                    Some(Tensor::cat(&biases, 0)?),
                )?,
                pad,
            })
        };
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let l = format!("encoder.layer.{i}");
                Ok(Layer {
                    qkv: linear(&[
                        &format!("{l}.attention.self.query"),
                        &format!("{l}.attention.self.key"),
                        &format!("{l}.attention.self.value"),
                    ])?,
                    out: linear(&[&format!("{l}.attention.output.dense")])?,
                    attention_norm: norm(&format!("{l}.attention.output.LayerNorm"))?,
                    up: linear(&[&format!("{l}.intermediate.dense")])?,
                    down: linear(&[&format!("{l}.output.dense")])?,
                    output_norm: norm(&format!("{l}.output.LayerNorm"))?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Quick {
            layers,
            heads: config.num_attention_heads,
            head_size: config.hidden_size / config.num_attention_heads,
            act: config.hidden_act,
        })
    }

    /// The last hidden states of one text, `(tokens, hidden)`, from the
    /// model's embeddings.
    pub(crate) fn forward(
        &self,
        embeddings: &Embeddings,
        ids: &[u32],
        types: &[u32],
    ) -> candle_core::Result<Tensor> {
        let len = ids.len();
        let mut x = embeddings.forward(ids, types, 1, len)?.squeeze(0)?;
        let hidden = self.heads * self.head_size;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        for layer in &self.layers {
            let qkv = layer.qkv.forward(&x)?;
            // (tokens, hidden) → (heads, tokens, head size)
            let split = |i: usize| {
                qkv.narrow(1, i * hidden, hidden)?
                    .reshape((len, self.heads, self.head_size))?
                    .transpose(0, 1)?
                    .contiguous()
            };
            let (q, k, v) = (split(0)?, split(1)?, split(2)?);
            let scores = (q.matmul(&k.t()?)? * scale)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probs
                .matmul(&v)?
                .transpose(0, 1)?
                .contiguous()?
                .reshape((len, hidden))?;
            x = layer
                .attention_norm
                .forward(&(layer.out.forward(&context)? + x)?)?;
            let up = layer.up.forward(&x)?;
            // As the f32 model applies the config's activation.
            let up = match self.act {
                HiddenAct::Gelu => up.gelu_erf()?,
                HiddenAct::GeluApproximate => up.gelu()?,
                HiddenAct::Relu => up.relu()?,
            };
            x = layer
                .output_norm
                .forward(&(layer.down.forward(&up)? + x)?)?;
        }
        Ok(x)
    }
}
