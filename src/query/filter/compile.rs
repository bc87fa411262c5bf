//! Compiling a parsed expression against a schema into the predicate
//! tree: columns resolved, literals typed, types checked, chains of one
//! operator flattened.

use super::parse::{at, chain};
use super::*;

pub(super) fn column_of<'a>(
    expr: &'a Expr,
    schema: &'a Schema,
) -> Result<Option<(&'a str, &'a ColumnType)>> {
    let ident = match expr {
        Expr::Identifier(id) => id,
        Expr::Nested(inner) => return column_of(inner, schema),
        Expr::CompoundIdentifier(parts) if parts.len() == 1 => &parts[0],
        _ => return Ok(None),
    };
    match schema.columns.iter().find(|c| c.name == ident.value) {
        Some(c) => {
            if let ColumnType::Vector { .. } = c.ty {
                return Err(filter_err(format!(
                    "column '{}'{} is a vector column; filters work on scalar columns",
                    ident.value,
                    at(ident)
                )));
            }
            Ok(Some((c.name.as_str(), &c.ty)))
        }
        None => Err(filter_err(format!(
            "unknown column '{}'{} (columns: {})",
            ident.value,
            at(ident),
            schema.names().join(", ")
        ))),
    }
}

pub(super) fn literal_of(expr: &Expr) -> Result<Option<Literal>> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(s, _) => {
                if let Ok(i) = s.parse::<i64>() {
                    Ok(Some(Literal::Int(i)))
                } else {
                    s.parse::<f64>()
                        .map(|f| Some(Literal::Float(f)))
                        .map_err(|_| filter_err(format!("bad number '{s}'")))
                }
            }
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Ok(Some(Literal::Str(s.clone())))
            }
            Value::Boolean(b) => Ok(Some(Literal::Bool(*b))),
            Value::Null => Err(filter_err(
                "comparison with NULL is never true; use IS NULL or IS NOT NULL".into(),
            )),
            other => Err(filter_err(format!("unsupported literal {other}"))),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal_of(expr)? {
            Some(Literal::Int(i)) => Ok(Some(Literal::Int(-i))),
            Some(Literal::Float(f)) => Ok(Some(Literal::Float(-f))),
            _ => Err(filter_err(format!("cannot negate {expr}"))),
        },
        Expr::Nested(inner) => literal_of(inner),
        _ => Ok(None),
    }
}

/// Checks that `lit` can be compared with a column of type `ty`.
pub(super) fn check_type(column: &str, ty: &ColumnType, lit: &Literal) -> Result<()> {
    let ok = matches!(
        (ty, lit),
        (
            ColumnType::Int64 | ColumnType::Float64,
            Literal::Int(_) | Literal::Float(_)
        ) | (ColumnType::Utf8, Literal::Str(_))
            | (ColumnType::Bool, Literal::Bool(_))
    );
    if ok {
        Ok(())
    } else {
        let lit_desc = match lit {
            Literal::Int(i) => format!("the integer {i}"),
            Literal::Float(f) => format!("the number {f}"),
            Literal::Str(s) => format!("the string '{s}'"),
            Literal::Bool(b) => format!("the boolean {b}"),
        };
        Err(filter_err(format!(
            "type mismatch: column '{column}' is {} but is compared with {lit_desc}",
            ty.describe()
        )))
    }
}

pub(super) fn column_and_literal(
    left: &Expr,
    right: &Expr,
    schema: &Schema,
) -> Result<(String, Literal, bool)> {
    if let Some((name, ty)) = column_of(left, schema)? {
        let lit = literal_of(right)?.ok_or_else(|| {
            filter_err(format!(
                "'{right}' must be a literal (column-to-column comparisons are not supported)"
            ))
        })?;
        check_type(name, ty, &lit)?;
        return Ok((name.to_string(), lit, false));
    }
    if let Some((name, ty)) = column_of(right, schema)? {
        let lit =
            literal_of(left)?.ok_or_else(|| filter_err(format!("'{left}' must be a literal")))?;
        check_type(name, ty, &lit)?;
        return Ok((name.to_string(), lit, true));
    }
    Err(filter_err(format!(
        "comparison '{left}' vs '{right}' names no column"
    )))
}

pub(super) fn compile(expr: &Expr, schema: &Schema, depth: usize) -> Result<Pred> {
    if depth > MAX_FILTER_DEPTH {
        return Err(filter_err(format!(
            "the filter nests deeper than {MAX_FILTER_DEPTH} levels (parentheses, NOT, \
             alternating AND/OR)"
        )));
    }
    Ok(match expr {
        Expr::Nested(inner) => compile(inner, schema, depth + 1)?,
        Expr::BinaryOp { op, .. } if matches!(op, BinaryOperator::And | BinaryOperator::Or) => {
            let operands = chain(expr, op)
                .into_iter()
                .map(|e| compile(e, schema, depth + 1))
                .collect::<Result<Vec<Pred>>>()?;
            if *op == BinaryOperator::And {
                Pred::And(operands)
            } else {
                Pred::Or(operands)
            }
        }
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq => {
                let cmp = match op {
                    BinaryOperator::Eq => CmpOp::Eq,
                    BinaryOperator::NotEq => CmpOp::Ne,
                    BinaryOperator::Lt => CmpOp::Lt,
                    BinaryOperator::LtEq => CmpOp::Le,
                    BinaryOperator::Gt => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                let (column, value, flipped) = column_and_literal(left, right, schema)?;
                Pred::Cmp {
                    column,
                    op: if flipped { cmp.flipped() } else { cmp },
                    value,
                }
            }
            other => {
                return Err(filter_err(format!(
                    "unsupported operator {other} in '{expr}'"
                )))
            }
        },
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => Pred::Not(Box::new(compile(expr, schema, depth + 1)?)),
        Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
            let (column, _) = column_of(inner, schema)?
                .ok_or_else(|| filter_err(format!("IS NULL needs a column, got '{inner}'")))?;
            Pred::IsNull {
                column: column.to_string(),
                negated: matches!(expr, Expr::IsNotNull(_)),
            }
        }
        Expr::InList {
            expr: inner,
            list,
            negated,
        } => {
            let (column, ty) = column_of(inner, schema)?.ok_or_else(|| {
                filter_err(format!("IN needs a column on its left, got '{inner}'"))
            })?;
            let mut values = Vec::new();
            for item in list {
                let lit = literal_of(item)?.ok_or_else(|| {
                    filter_err(format!("IN list item '{item}' must be a literal"))
                })?;
                check_type(column, ty, &lit)?;
                values.push(lit);
            }
            Pred::InList {
                column: column.to_string(),
                values,
                negated: *negated,
            }
        }
        Expr::Between {
            expr: inner,
            negated,
            low,
            high,
        } => {
            let (column, lo, _) = column_and_literal(inner, low, schema)?;
            let (_, hi, _) = column_and_literal(inner, high, schema)?;
            let range = Pred::And(vec![
                Pred::Cmp {
                    column: column.clone(),
                    op: CmpOp::Ge,
                    value: lo,
                },
                Pred::Cmp {
                    column,
                    op: CmpOp::Le,
                    value: hi,
                },
            ]);
            if *negated {
                Pred::Not(Box::new(range))
            } else {
                range
            }
        }
        Expr::Like {
            negated,
            expr: inner,
            pattern,
            escape_char,
            any,
            ..
        } => {
            if escape_char.is_some() || *any {
                return Err(filter_err(
                    "LIKE ... ESCAPE / LIKE ANY are not supported".into(),
                ));
            }
            let (column, ty) = column_of(inner, schema)?.ok_or_else(|| {
                filter_err(format!("LIKE needs a column on its left, got '{inner}'"))
            })?;
            let Some(Literal::Str(p)) = literal_of(pattern)? else {
                return Err(filter_err(format!(
                    "LIKE needs a string pattern, got '{pattern}'"
                )));
            };
            if *ty != ColumnType::Utf8 {
                return Err(filter_err(format!(
                    "type mismatch: LIKE needs a utf8 column, '{column}' is {}",
                    ty.describe()
                )));
            }
            Pred::Like {
                column: column.to_string(),
                pattern: p.chars().collect(),
                negated: *negated,
            }
        }
        Expr::Value(_) => match literal_of(expr)? {
            Some(Literal::Bool(b)) => Pred::Const(b),
            _ => return Err(filter_err(format!("'{expr}' is not a boolean expression"))),
        },
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
            let (column, ty) = column_of(expr, schema)?
                .ok_or_else(|| filter_err(format!("'{expr}' is not a boolean expression")))?;
            if *ty != ColumnType::Bool {
                return Err(filter_err(format!(
                    "column '{column}' is {}, not a boolean expression",
                    ty.describe()
                )));
            }
            Pred::Cmp {
                column: column.to_string(),
                op: CmpOp::Eq,
                value: Literal::Bool(true),
            }
        }
        other => return Err(filter_err(format!("unsupported expression '{other}'"))),
    })
}
