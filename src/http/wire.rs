//! Query vectors on the wire: a JSON array of numbers, or a string of
//! base64-encoded little-endian float32 (4 bytes a dimension). The string
//! form is about a third of the size of decimal numbers and is decoded
//! without parsing a float per dimension; both give the same `f32` bits
//! to the engine, so both get the same answers. A batch may also come as
//! a raw body of little-endian float32 (`application/octet-stream`),
//! query after query, with its options in the query string
//! ([`split_raw_batch`]), or as an Arrow IPC stream
//! (`application/vnd.apache.arrow.stream`) of one `FixedSizeList<Float32>`
//! column, a row per query ([`arrow_batch`]).

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
    if !bytes.len().is_multiple_of(4) {
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

/// The query vectors of a raw batch body: little-endian float32, `dim`
/// per query, query after query.
pub fn split_raw_batch(body: &[u8], dim: usize) -> Result<Vec<Vec<f32>>, String> {
    let per_query = dim * 4;
    if per_query == 0 || body.is_empty() || !body.len().is_multiple_of(per_query) {
        return Err(format!(
            "a raw batch body holds whole query vectors of {dim} little-endian float32 \
             ({per_query} bytes each); this one has {} bytes",
            body.len()
        ));
    }
    Ok(body
        .chunks_exact(per_query)
        .map(|q| {
            q.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect())
}

/// The query vectors of an Arrow IPC stream body: its record batches'
/// first column, `FixedSizeList<Float32>` of `dim` values a row (other
/// columns are ignored), a row per query, in order. Null rows or values
/// are refused (a query must be a whole vector).
pub fn arrow_batch(body: &[u8], dim: usize) -> Result<Vec<Vec<f32>>, String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use arrow_array::Array;
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
        .map_err(|e| format!("the body is not an Arrow IPC stream: {e}"))?;
    let mut queries = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| format!("the Arrow IPC stream is damaged: {e}"))?;
        let Some(column) = batch.columns().first() else {
            return Err("the Arrow IPC stream's batches have no column".into());
        };
        let list = column.as_fixed_size_list_opt().ok_or_else(|| {
            format!(
                "the first column of an Arrow batch body must be FixedSizeList<Float32> \
                 ({dim} values a row); it is {}",
                column.data_type()
            )
        })?;
        let values = list
            .values()
            .as_primitive_opt::<Float32Type>()
            .ok_or_else(|| {
                format!(
                    "the first column of an Arrow batch body must hold Float32 values; it holds {}",
                    list.value_type()
                )
            })?;
        if list.value_length() as usize != dim {
            return Err(format!(
                "the Arrow batch body's vectors have {} values; the column has {dim} dimensions",
                list.value_length()
            ));
        }
        if list.null_count() > 0 || values.null_count() > 0 {
            return Err("an Arrow batch body's vectors may not be null or hold nulls".into());
        }
        for row in 0..list.len() {
            let at = list.value_offset_at(row);
            queries.push(values.values()[at..at + dim].to_vec());
        }
    }
    if queries.is_empty() {
        return Err("the Arrow batch body holds no query vector".into());
    }
    Ok(queries)
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
    fn a_raw_batch_is_cut_into_whole_vectors() {
        let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 1.0).collect();
        let body: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        let queries = split_raw_batch(&body, 4).unwrap();
        assert_eq!(queries.len(), 3);
        assert_eq!(queries[2], values[8..].to_vec());
        assert!(split_raw_batch(&body, 5).unwrap_err().contains("48 bytes"));
        assert!(split_raw_batch(&body[..47], 4).is_err());
        assert!(split_raw_batch(&[], 4).is_err());
    }

    fn arrow_stream(dim: i32, rows: &[Option<Vec<f32>>]) -> Vec<u8> {
        use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
        use arrow_schema::{DataType, Field, Schema};
        let item = std::sync::Arc::new(Field::new("item", DataType::Float32, true));
        let flat: Vec<f32> = rows
            .iter()
            .flat_map(|r| r.clone().unwrap_or(vec![0.0; dim as usize]))
            .collect();
        let nulls = rows.iter().any(|r| r.is_none()).then(|| {
            arrow_buffer::NullBuffer::from(rows.iter().map(|r| r.is_some()).collect::<Vec<_>>())
        });
        let list = FixedSizeListArray::new(
            item.clone(),
            dim,
            std::sync::Arc::new(Float32Array::from(flat)),
            nulls,
        );
        let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
            "vector",
            DataType::FixedSizeList(item, dim),
            true,
        )]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![std::sync::Arc::new(list) as ArrayRef])
                .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
        w.write(&batch).unwrap();
        w.write(&batch.slice(1, 1)).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    #[test]
    fn an_arrow_stream_body_gives_its_rows_bit_for_bit() {
        let rows = vec![
            Some(vec![0.1f32, -2.0, 3.5]),
            Some(vec![f32::MIN_POSITIVE, 0.0, -0.0]),
        ];
        let queries = arrow_batch(&arrow_stream(3, &rows), 3).unwrap();
        // Two record batches: both rows, then the second again (a slice).
        assert_eq!(queries.len(), 3);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&queries[0]), bits(rows[0].as_ref().unwrap()));
        assert_eq!(bits(&queries[1]), bits(rows[1].as_ref().unwrap()));
        assert_eq!(bits(&queries[2]), bits(rows[1].as_ref().unwrap()));
        assert!(arrow_batch(&arrow_stream(3, &rows), 4)
            .unwrap_err()
            .contains("3 values"));
        let with_null = arrow_stream(3, &[Some(vec![1.0, 2.0, 3.0]), None]);
        assert!(arrow_batch(&with_null, 3).unwrap_err().contains("null"));
        assert!(arrow_batch(b"not arrow", 3)
            .unwrap_err()
            .contains("not an Arrow IPC stream"));
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
