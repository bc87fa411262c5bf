//! `.fvecs`, `.ivecs` and `.npy`: the chunked vector readers of ingest and
//! the whole-file readers and writers used for queries and ground truth.

use super::*;

/// Largest vector dimension an input file may declare (a corrupt header
/// must not size anything beyond it).
const MAX_INPUT_DIM: usize = 1 << 20;

pub(super) fn bytes_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Reads up to `max_rows` `.fvecs` records; errors name the record and byte.
pub(super) fn read_fvecs_chunk(
    reader: &mut CountingReader,
    path: &Path,
    dim: &mut Option<usize>,
    max_rows: usize,
    first_row: u64,
) -> Result<Option<(usize, Vec<f32>)>> {
    let mut data = Vec::new();
    let mut rows = 0usize;
    let mut head = [0u8; 4];
    let mut record = Vec::new();
    while rows < max_rows {
        let at = reader.offset;
        let row = first_row + rows as u64;
        let got = reader.read_full(&mut head, path)?;
        if got == 0 {
            break;
        }
        if got < 4 {
            return Err(Error::malformed(
                path,
                format!(
                    "truncated: record {row} header ends at byte {}",
                    reader.offset
                ),
            ));
        }
        let d = i32::from_le_bytes(head);
        if d <= 0 || d as usize > MAX_INPUT_DIM {
            return Err(Error::malformed(
                path,
                format!("record {row} at byte {at} has dimension {d}"),
            ));
        }
        let d = d as usize;
        match *dim {
            None => *dim = Some(d),
            Some(expected) if expected != d => {
                return Err(Error::malformed(
                    path,
                    format!(
                    "record {row} at byte {at} has dimension {d}, earlier records have {expected}"
                ),
                ))
            }
            _ => {}
        }
        record.resize(d * 4, 0);
        let got = reader.read_full(&mut record, path)?;
        if got < record.len() {
            return Err(Error::malformed(
                path,
                format!(
                    "truncated: record {row} ends at byte {} after {got} of {} bytes",
                    reader.offset,
                    d * 4
                ),
            ));
        }
        data.extend(bytes_to_f32(&record));
        rows += 1;
    }
    Ok(if rows == 0 {
        None
    } else {
        dim.map(|d| (d, data))
    })
}

/// Parses an `.npy` header; accepts only 2-D little-endian float32 C-order.
pub(super) fn read_npy_header(reader: &mut CountingReader, path: &Path) -> Result<(u64, usize)> {
    let mut magic = [0u8; 8];
    if reader.read_full(&mut magic, path)? < 8 || &magic[..6] != b"\x93NUMPY" {
        return Err(Error::malformed(
            path,
            "not an .npy file (bad magic at byte 0)",
        ));
    }
    let header_len = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            if reader.read_full(&mut b, path)? < 2 {
                return Err(Error::malformed(path, "truncated header"));
            }
            u16::from_le_bytes(b) as usize
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            if reader.read_full(&mut b, path)? < 4 {
                return Err(Error::malformed(path, "truncated header"));
            }
            u32::from_le_bytes(b) as usize
        }
        v => {
            return Err(Error::malformed(
                path,
                format!("unsupported .npy version {v}"),
            ))
        }
    };
    if header_len > 1 << 20 {
        return Err(Error::malformed(
            path,
            format!("header length {header_len} is implausible"),
        ));
    }
    let mut header = vec![0u8; header_len];
    if reader.read_full(&mut header, path)? < header_len {
        return Err(Error::malformed(path, "truncated header"));
    }
    let header = String::from_utf8_lossy(&header);
    let field = |key: &str| -> Option<String> {
        let start = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
        let end = if rest.starts_with('(') {
            rest.find(')')? + 1
        } else {
            rest.find([',', '}'])?
        };
        Some(rest[..end].trim().to_string())
    };
    let descr = field("descr").ok_or_else(|| Error::malformed(path, "header has no 'descr'"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    if descr != "<f4" && descr != "f4" {
        return Err(Error::malformed(
            path,
            format!("dtype is {descr}, only little-endian float32 (<f4) is supported"),
        ));
    }
    if field("fortran_order").as_deref() != Some("False") {
        return Err(Error::malformed(
            path,
            "only C-order (fortran_order: False) arrays are supported",
        ));
    }
    let shape = field("shape").ok_or_else(|| Error::malformed(path, "header has no 'shape'"))?;
    let dims: Vec<u64> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::malformed(path, format!("bad shape {shape}")))?;
    match dims.as_slice() {
        [_, dim] if *dim == 0 || *dim > MAX_INPUT_DIM as u64 => Err(Error::malformed(
            path,
            format!("shape {shape} has dimension {dim} (1 to {MAX_INPUT_DIM} supported)"),
        )),
        [rows, dim] => Ok((*rows, *dim as usize)),
        _ => Err(Error::malformed(
            path,
            format!("shape {shape} is not 2-D (rows, dim)"),
        )),
    }
}

/// Reads every vector of an `.fvecs` or `.npy` file (for query files).
pub fn read_vectors(path: &Path) -> Result<(usize, Vec<Vec<f32>>)> {
    let opts = IngestOptions::default();
    let format = Format::of(path)?;
    if !matches!(format, Format::Fvecs | Format::Npy) {
        return Err(Error::InvalidArgument(format!(
            "query files must be .fvecs or .npy, got {}",
            path.display()
        )));
    }
    let mut reader = ChunkReader::open(format, path, &opts, 1 << 16)?;
    let mut out = Vec::new();
    let mut dim = 0;
    while let Some(Chunk::Vectors { dim: d, data, .. }) = reader.next_chunk()? {
        dim = d;
        out.extend(data.chunks_exact(d).map(|c| c.to_vec()));
    }
    if out.is_empty() {
        return Err(Error::malformed(path, "holds no vectors"));
    }
    Ok((dim, out))
}

/// Reads an `.ivecs` file (e.g. ground truth): per record an int32 count
/// then that many int32s.
pub fn read_ivecs(path: &Path) -> Result<Vec<Vec<i32>>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let head = bytes.get(at..at + 4).ok_or_else(|| {
            Error::malformed(path, format!("truncated record header at byte {at}"))
        })?;
        let n = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if n < 0 {
            return Err(Error::malformed(
                path,
                format!("negative count at byte {at}"),
            ));
        }
        let body = bytes
            .get(at + 4..at + 4 + n as usize * 4)
            .ok_or_else(|| Error::malformed(path, format!("truncated record at byte {at}")))?;
        out.push(
            body.chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        );
        at += 4 + n as usize * 4;
    }
    Ok(out)
}

/// Writes vectors as `.fvecs`.
pub fn write_fvecs(path: &Path, vectors: &[Vec<f32>]) -> Result<()> {
    let mut bytes = Vec::new();
    for v in vectors {
        bytes.extend_from_slice(&(v.len() as i32).to_le_bytes());
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// Writes records of int32s as `.ivecs`.
pub fn write_ivecs(path: &Path, records: &[Vec<i32>]) -> Result<()> {
    let mut bytes = Vec::new();
    for r in records {
        bytes.extend_from_slice(&(r.len() as i32).to_le_bytes());
        for x in r {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}
