//! A snapshot cut into splits that can be searched apart (by separate
//! workers of a SQL engine, say) and merged per query.

use super::Dataset;
use crate::error::Result;
use serde::Serialize;

/// A part of a snapshot that a search can be limited to
/// ([`SharedParams::split`](crate::SharedParams::split)): the fragments one
/// index segment of the column covers, or one fragment no segment covers.
/// The splits of a snapshot are disjoint and cover every fragment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Split {
    /// Its fragment ids, ascending.
    pub fragments: Vec<u32>,
    /// The index segment that covers them, if any.
    pub segment: Option<String>,
    /// Rows that are not deleted.
    pub rows: u64,
}

impl Dataset {
    /// This version's splits for vector column `column` (the only one when
    /// `None`): one per index segment of the column, then one per fragment
    /// no segment covers, in fragment order.
    pub fn splits(&self, column: Option<&str>) -> Result<Vec<Split>> {
        let (column, _, _) = self.schema().vector_column(column)?;
        let fragments = self.fragments()?;
        let visible = |id: u32| -> u64 {
            fragments.iter().find(|f| f.meta.id == id).map_or(0, |f| {
                (f.rows() - f.deleted.as_ref().map_or(0, |d| d.len() as usize)) as u64
            })
        };
        let present = |id: &u32| fragments.iter().any(|f| f.meta.id == *id);
        let mut splits = Vec::new();
        let mut covered = Vec::new();
        for seg in self.manifest.indices.iter().filter(|s| s.column == column) {
            let mut ids: Vec<u32> = seg.fragments.iter().copied().filter(present).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                continue;
            }
            covered.extend_from_slice(&ids);
            splits.push(Split {
                rows: ids.iter().map(|&id| visible(id)).sum(),
                fragments: ids,
                segment: Some(seg.id.clone()),
            });
        }
        for f in fragments.iter().filter(|f| !covered.contains(&f.meta.id)) {
            splits.push(Split {
                fragments: vec![f.meta.id],
                segment: None,
                rows: visible(f.meta.id),
            });
        }
        Ok(splits)
    }
}
