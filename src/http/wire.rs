//! Query vectors on the wire: a JSON array of numbers, or a string of
//! base64-encoded little-endian float32 (4 bytes a dimension). The string
//! form is about a third of the size of decimal numbers and is decoded
//! without parsing a float per dimension; both give the same `f32` bits
//! to the engine, so both get the same answers.

use base64::Engine as _;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// One query vector in either encoding.
struct WireVector(Vec<f32>);

impl<'de> Deserialize<'de> for WireVector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WireVisitor)
    }
}

struct WireVisitor;

impl<'de> Visitor<'de> for WireVisitor {
    type Value = WireVector;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of numbers, or a string of base64-encoded little-endian float32")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WireVector, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(x) = seq.next_element::<f32>()? {
            values.push(x);
        }
        Ok(WireVector(values))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<WireVector, E> {
        decode_base64_f32(text).map(WireVector).map_err(E::custom)
    }
}

/// The float32 values of a base64 string of their little-endian bytes.
pub fn decode_base64_f32(text: &str) -> Result<Vec<f32>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("vector is not valid base64: {e}"))?;
    if bytes.len() % 4 != 0 {
        return Err(format!(
            "a base64 vector holds 4 bytes (little-endian float32) per dimension; it decodes to {} bytes",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `deserialize_with` for a query vector field.
pub fn vector<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
    WireVector::deserialize(d).map(|v| v.0)
}

/// `deserialize_with` for an optional list of query vectors.
pub fn vectors<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Vec<f32>>>, D::Error> {
    let list: Option<Vec<WireVector>> = Option::deserialize(d)?;
    Ok(list.map(|l| l.into_iter().map(|v| v.0).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Body {
        #[serde(deserialize_with = "vector")]
        vector: Vec<f32>,
    }

    fn encode(values: &[f32]) -> String {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn base64_and_numbers_give_the_same_bits() {
        let values = [0.1f32, -3.5, 1e-30, f32::MAX, 0.0, -0.0, 12345.678];
        let numbers: Body =
            serde_json::from_str(&format!("{{\"vector\": {}}}", serde_json::json!(values)))
                .unwrap();
        let packed: Body =
            serde_json::from_str(&format!("{{\"vector\": \"{}\"}}", encode(&values))).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&packed.vector), bits(&values));
        assert_eq!(bits(&numbers.vector), bits(&values));
    }

    #[test]
    fn bad_base64_and_partial_floats_are_clear_errors() {
        let bad = serde_json::from_str::<Body>("{\"vector\": \"not base64!\"}");
        assert!(bad.err().unwrap().to_string().contains("not valid base64"));
        let short = serde_json::from_str::<Body>("{\"vector\": \"AAAAAAA=\"}"); // 5 bytes
        assert!(short.err().unwrap().to_string().contains("4 bytes"));
        let wrong = serde_json::from_str::<Body>("{\"vector\": {\"x\": 1}}");
        assert!(wrong.err().unwrap().to_string().contains("base64-encoded"));
    }
}
