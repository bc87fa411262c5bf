//! Evaluating a compiled predicate over a fragment's columns, in SQL's
//! three-valued logic, for every row or for chosen offsets.

use super::*;

/// SQL LIKE: `%` matches any run of characters, `_` exactly one.
pub(super) fn like(text: &str, pattern: &[char]) -> bool {
    let t: Vec<char> = text.chars().collect();
    // Classic wildcard matching with backtracking over the last '%'.
    let (mut ti, mut pi) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < pattern.len() && (pattern[pi] == '_' || pattern[pi] == t[ti]) {
            ti += 1;
            pi += 1;
        } else if pi < pattern.len() && pattern[pi] == '%' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    pattern[pi..].iter().all(|c| *c == '%')
}

pub(super) type Truth = Vec<Option<bool>>;

/// The rows of a batch an evaluation covers: all of them, or some.
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    All(usize),
    At(&'a [u32]),
}

impl Rows<'_> {
    fn len(self) -> usize {
        match self {
            Rows::All(n) => n,
            Rows::At(rows) => rows.len(),
        }
    }

    /// `f` of every covered row, in order.
    #[inline]
    fn map(self, mut f: impl FnMut(usize) -> Option<bool>) -> Truth {
        match self {
            Rows::All(n) => (0..n).map(f).collect(),
            Rows::At(rows) => rows.iter().map(|&r| f(r as usize)).collect(),
        }
    }
}

pub(super) fn compare_literal(value: &Literal, row: RowValue<'_>) -> Option<std::cmp::Ordering> {
    match (row, value) {
        (RowValue::Int(a), Literal::Int(b)) => Some(a.cmp(b)),
        (RowValue::Int(a), Literal::Float(b)) => (a as f64).partial_cmp(b),
        (RowValue::Float(a), Literal::Int(b)) => a.partial_cmp(&(*b as f64)),
        (RowValue::Float(a), Literal::Float(b)) => a.partial_cmp(b),
        (RowValue::Str(a), Literal::Str(b)) => Some(a.cmp(b.as_str())),
        (RowValue::Bool(a), Literal::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

#[derive(Clone, Copy)]
pub(super) enum RowValue<'a> {
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
}

/// Calls `f` with each covered row's value of `column` (None for NULL).
pub(super) fn map_column(
    batch: &RecordBatch,
    rows: Rows<'_>,
    column: &str,
    mut f: impl FnMut(Option<RowValue<'_>>) -> Option<bool>,
) -> Result<Truth> {
    let array = batch.column_by_name(column).ok_or_else(|| {
        Error::Internal(format!("filter column '{column}' missing from fragment"))
    })?;
    let any = array.as_any();
    let out = if let Some(a) = any.downcast_ref::<Int64Array>() {
        rows.map(|i| f(a.is_valid(i).then(|| RowValue::Int(a.value(i)))))
    } else if let Some(a) = any.downcast_ref::<Float64Array>() {
        rows.map(|i| f(a.is_valid(i).then(|| RowValue::Float(a.value(i)))))
    } else if let Some(a) = any.downcast_ref::<StringArray>() {
        rows.map(|i| f(a.is_valid(i).then(|| RowValue::Str(a.value(i)))))
    } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
        rows.map(|i| f(a.is_valid(i).then(|| RowValue::Bool(a.value(i)))))
    } else {
        return Err(Error::Internal(format!(
            "filter column '{column}' has an unexpected type"
        )));
    };
    Ok(out)
}

pub(super) fn eval(pred: &Pred, batch: &RecordBatch, rows: Rows<'_>) -> Result<Truth> {
    Ok(match pred {
        Pred::Const(b) => vec![Some(*b); rows.len()],
        Pred::Cmp { column, op, value } => map_column(batch, rows, column, |v| {
            v.and_then(|v| compare_literal(value, v))
                .map(|o| op.holds(o))
        })?,
        Pred::InList {
            column,
            values,
            negated,
        } => map_column(batch, rows, column, |v| {
            let v = v?;
            let found = values
                .iter()
                .any(|l| compare_literal(l, v) == Some(std::cmp::Ordering::Equal));
            Some(found != *negated)
        })?,
        Pred::IsNull { column, negated } => {
            map_column(batch, rows, column, |v| Some(v.is_none() != *negated))?
        }
        Pred::Like {
            column,
            pattern,
            negated,
        } => map_column(batch, rows, column, |v| match v? {
            RowValue::Str(s) => Some(like(s, pattern) != *negated),
            _ => None,
        })?,
        Pred::Not(inner) => eval(inner, batch, rows)?
            .into_iter()
            .map(|t| t.map(|b| !b))
            .collect(),
        Pred::And(operands) => fold(operands, batch, rows, Some(true), |x, y| match (x, y) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        })?,
        Pred::Or(operands) => fold(operands, batch, rows, Some(false), |x, y| match (x, y) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        })?,
    })
}

/// Combines the operands of an n-ary AND/OR row by row with the
/// three-valued `combine`, starting from its `identity`.
pub(super) fn fold(
    operands: &[Pred],
    batch: &RecordBatch,
    rows: Rows<'_>,
    identity: Option<bool>,
    combine: impl Fn(Option<bool>, Option<bool>) -> Option<bool>,
) -> Result<Truth> {
    let mut acc = vec![identity; rows.len()];
    for operand in operands {
        for (x, y) in acc.iter_mut().zip(eval(operand, batch, rows)?) {
            *x = combine(*x, y);
        }
    }
    Ok(acc)
}
