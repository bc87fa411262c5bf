//! The logical schema of a dataset and its mapping to Arrow.

use crate::error::{Error, Result};
use crate::kernel::Metric;
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Name of the user-visible id column every dataset has.
pub const ID_COLUMN: &str = "id";

/// The type of one column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ColumnType {
    /// Fixed-dimension float32 vectors, with the metric searches use by default.
    Vector {
        /// Floats per vector.
        dim: usize,
        /// The metric searches use unless they name another.
        metric: Metric,
    },
    /// 64-bit signed integers.
    Int64,
    /// 64-bit floats.
    Float64,
    /// UTF-8 strings.
    Utf8,
    /// Booleans.
    Bool,
}

impl ColumnType {
    /// Short human-readable name, used in error messages.
    pub fn describe(&self) -> String {
        match self {
            ColumnType::Vector { dim, .. } => format!("vector[{dim}]"),
            ColumnType::Int64 => "int64".into(),
            ColumnType::Float64 => "float64".into(),
            ColumnType::Utf8 => "utf8".into(),
            ColumnType::Bool => "bool".into(),
        }
    }

    /// The scalar column type an Arrow type is read as (integers → int64,
    /// floats → float64, any string → utf8, boolean → bool; a dictionary
    /// as its values, which conforming casts out); `None` for everything
    /// else, including lists.
    pub fn from_arrow_scalar(dt: &DataType) -> Option<ColumnType> {
        match dt {
            DataType::Dictionary(_, values) => ColumnType::from_arrow_scalar(values),
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32 => Some(ColumnType::Int64),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Some(ColumnType::Float64),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(ColumnType::Utf8),
            DataType::Boolean => Some(ColumnType::Bool),
            _ => None,
        }
    }

    /// The Arrow type this column is stored as.
    pub fn arrow_type(&self) -> DataType {
        match self {
            ColumnType::Vector { dim, .. } => DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, false)),
                *dim as i32,
            ),
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::Bool => DataType::Boolean,
        }
    }
}

/// One named column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Column type.
    #[serde(flatten)]
    pub ty: ColumnType,
}

/// The columns of a dataset. The `id` column (int64, not null) comes first;
/// vector columns are never null; scalar columns may hold nulls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// Columns in storage order.
    pub columns: Vec<Column>,
}

impl Schema {
    /// Builds a schema from `(name, type)` pairs; the `id` column is added in
    /// front when missing. Fails on duplicates, empty names, a mistyped `id`,
    /// zero-dimension vectors or no vector column at all.
    pub fn new<S: Into<String>>(
        columns: impl IntoIterator<Item = (S, ColumnType)>,
    ) -> Result<Schema> {
        let mut out = vec![Column {
            name: ID_COLUMN.into(),
            ty: ColumnType::Int64,
        }];
        for (name, ty) in columns {
            let name: String = name.into();
            if name.is_empty() {
                return Err(Error::InvalidArgument("column name is empty".into()));
            }
            if name == ID_COLUMN {
                if ty != ColumnType::Int64 {
                    return Err(Error::WrongColumnType {
                        name,
                        expected: "int64".into(),
                        actual: ty.describe(),
                    });
                }
                continue;
            }
            if out.iter().any(|c| c.name == name) {
                return Err(Error::InvalidArgument(format!("duplicate column '{name}'")));
            }
            if let ColumnType::Vector { dim, .. } = ty {
                if dim == 0 {
                    return Err(Error::InvalidArgument(format!(
                        "vector column '{name}' has dimension 0"
                    )));
                }
            }
            out.push(Column { name, ty });
        }
        if !out
            .iter()
            .any(|c| matches!(c.ty, ColumnType::Vector { .. }))
        {
            return Err(Error::InvalidArgument(
                "a dataset needs at least one vector column".into(),
            ));
        }
        Ok(Schema { columns: out })
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Result<&Column> {
        self.columns
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::UnknownColumn {
                name: name.into(),
                available: self.names(),
            })
    }

    /// Column names in order.
    pub fn names(&self) -> Vec<String> {
        self.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// The vector column called `name`, or the only vector column when
    /// `name` is `None`. Returns `(name, dim, default metric)`.
    pub fn vector_column(&self, name: Option<&str>) -> Result<(&str, usize, Metric)> {
        let col = match name {
            Some(n) => self.column(n)?,
            None => {
                let vectors: Vec<&Column> = self
                    .columns
                    .iter()
                    .filter(|c| matches!(c.ty, ColumnType::Vector { .. }))
                    .collect();
                match vectors.as_slice() {
                    [one] => *one,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "the dataset has {} vector columns ({}); name one with `column`",
                            vectors.len(),
                            vectors
                                .iter()
                                .map(|c| c.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )))
                    }
                }
            }
        };
        match col.ty {
            ColumnType::Vector { dim, metric } => Ok((col.name.as_str(), dim, metric)),
            ref other => Err(Error::WrongColumnType {
                name: col.name.clone(),
                expected: "a vector column".into(),
                actual: other.describe(),
            }),
        }
    }

    /// The Arrow schema of stored fragments.
    pub fn arrow_schema(&self) -> Arc<ArrowSchema> {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| {
                let nullable = !matches!(c.ty, ColumnType::Vector { .. }) && c.name != ID_COLUMN;
                Field::new(&c.name, c.ty.arrow_type(), nullable)
            })
            .collect();
        Arc::new(ArrowSchema::new(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_added_first_and_duplicates_are_refused() {
        let s = Schema::new(vec![(
            "v",
            ColumnType::Vector {
                dim: 3,
                metric: Metric::L2,
            },
        )])
        .unwrap();
        assert_eq!(s.names(), vec!["id", "v"]);
        assert_eq!(s.vector_column(None).unwrap(), ("v", 3, Metric::L2));
        assert!(Schema::new(vec![("a", ColumnType::Int64), ("a", ColumnType::Int64)]).is_err());
        assert!(Schema::new(vec![("a", ColumnType::Int64)]).is_err());
        assert!(matches!(s.column("nope"), Err(Error::UnknownColumn { .. })));
        assert!(matches!(
            s.vector_column(Some("id")),
            Err(Error::WrongColumnType { .. })
        ));
    }
}
