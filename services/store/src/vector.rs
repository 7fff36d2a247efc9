//! How a vector of floats is stored: its f32 values as little-endian bytes, 4
//! bytes each, in order, so a vector reads back bit for bit on any machine.

use trawl_core::ports::PortError;

pub(crate) fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Vec<f32>, PortError> {
    let chunks = bytes.chunks_exact(4);
    if !chunks.remainder().is_empty() {
        return Err(PortError::Corrupt(format!(
            "a stored vector of {} bytes, not a whole number of f32s",
            bytes.len()
        )));
    }
    Ok(chunks
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_bit_for_bit() {
        let v = [0.0, -0.0, 1.5, f32::MIN_POSITIVE, f32::NAN, -3.25e-7];
        let bytes = to_bytes(&v);
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[8..12], &1.5f32.to_le_bytes());
        let back = from_bytes(&bytes).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&v));
        assert!(from_bytes(&bytes[..5]).is_err());
    }
}
