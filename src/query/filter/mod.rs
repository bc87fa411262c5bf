//! Filters: SQL boolean expressions over scalar columns.
//!
//! Parsed with `sqlparser`, then compiled against a schema into a small
//! predicate tree (columns resolved, types checked), then evaluated per
//! fragment into a bitmap of matching row offsets. Evaluation follows SQL's
//! three-valued logic: a comparison with NULL is unknown, and only rows whose
//! predicate is *true* match. The three steps are the submodules `parse`,
//! `compile` and `eval`; this module holds the predicate tree and
//! [`Filter`], which runs them.
//!
//! Supported: `= != <> < <= > >=`, `AND OR NOT`, parentheses, `IN (...)`,
//! `BETWEEN a AND b`, `IS [NOT] NULL`, `[NOT] LIKE 'pattern'` (`%` and `_`),
//! literals of int, float, string and bool. A column is compared with a
//! literal (either side); column-to-column comparisons are not supported.
//!
//! Size never becomes stack depth: the boolean layer (AND, OR, NOT,
//! parentheses) is parsed by a loop of ours that keeps a chain's operands in
//! a list until it is complete, and sqlparser parses each predicate in
//! between, whose runs of operators are bounded first (and `CASE … END`,
//! `[ ]` and `{ }`, which nest without parentheses, are refused); so no parse, even
//! one failing after 100,000 terms, builds or drops a deep tree. A chain
//! `a AND b AND …` (left-deep, as sqlparser builds it) is walked with a loop
//! into one n-ary node, rendered and torn down without recursion, so a
//! filter of 100,000 terms works on a 2 MiB thread stack. What remains
//! recursive is real nesting (parentheses, NOT, mixed AND/OR), bounded by
//! [`MAX_FILTER_DEPTH`] and, inside a predicate, by sqlparser's own
//! recursion limit.

mod compile;
mod eval;
mod parse;

use compile::compile;
use eval::{eval, Rows};
use parse::{dismantle, parse_expr, render};

use crate::error::{Error, Result};
use crate::storage::schema::{ColumnType, Schema};
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use roaring::RoaringBitmap;
use sqlparser::ast::{BinaryOperator, Expr, Ident, UnaryOperator, Value};
use sqlparser::dialect::{Dialect, GenericDialect, Precedence};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// A literal value in a filter.
#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }

    fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::Ne => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::Le => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::Ge => ord != Less,
        }
    }
}

#[derive(Clone, Debug)]
enum Pred {
    Cmp {
        column: String,
        op: CmpOp,
        value: Literal,
    },
    InList {
        column: String,
        values: Vec<Literal>,
        negated: bool,
    },
    IsNull {
        column: String,
        negated: bool,
    },
    Like {
        column: String,
        pattern: Vec<char>,
        negated: bool,
    },
    /// True when every operand is (at least two; a flattened chain).
    And(Vec<Pred>),
    /// True when any operand is.
    Or(Vec<Pred>),
    Not(Box<Pred>),
    Const(bool),
}

/// A parsed and type-checked filter, ready to evaluate on fragments.
#[derive(Clone, Debug)]
pub struct Filter {
    sql: String,
    normalized: String,
    pred: Pred,
}

impl Filter {
    /// Parses `sql` and checks it against `schema`. Errors name the problem
    /// and, where the parser gives one, its position.
    pub fn parse(sql: &str, schema: &Schema) -> Result<Filter> {
        if sql.trim().is_empty() {
            return Err(Error::Filter {
                message: "the filter is empty".into(),
            });
        }
        let expr = parse_expr(sql)?;
        let compiled = compile(&expr, schema, 0);
        let normalized = render(&expr);
        dismantle(expr);
        Ok(Filter {
            sql: sql.to_string(),
            normalized,
            pred: compiled?,
        })
    }

    /// The filter's source text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The filter in normal form (the parser's rendering: spacing and
    /// keyword case do not matter), which parses back to the same filter;
    /// the engine batches searches whose filters normalise alike.
    pub fn normalized(&self) -> &str {
        &self.normalized
    }

    /// The columns the filter reads, each once, in order of appearance: a
    /// prefilter loads only these.
    pub fn columns(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let mut stack = vec![&self.pred];
        while let Some(p) = stack.pop() {
            match p {
                Pred::Cmp { column, .. }
                | Pred::InList { column, .. }
                | Pred::IsNull { column, .. }
                | Pred::Like { column, .. } => {
                    if !out.contains(&column.as_str()) {
                        out.push(column);
                    }
                }
                Pred::And(operands) | Pred::Or(operands) => {
                    stack.extend(operands.iter().rev());
                }
                Pred::Not(a) => stack.push(a),
                Pred::Const(_) => {}
            }
        }
        out
    }

    /// Whether the filter is true at each of the rows `rows` of `batch`
    /// (in that order): what a scan needs when it touches only some rows
    /// of a fragment, at a cost that follows those rows, not the fragment.
    pub fn evaluate_at(&self, batch: &RecordBatch, rows: &[u32]) -> Result<Vec<bool>> {
        if let Some(&bad) = rows.iter().find(|&&r| r as usize >= batch.num_rows()) {
            return Err(Error::Internal(format!(
                "filter asked about row {bad} of a batch of {}",
                batch.num_rows()
            )));
        }
        Ok(eval(&self.pred, batch, Rows::At(rows))?
            .into_iter()
            .map(|t| t == Some(true))
            .collect())
    }

    /// Whether the filter is true at each row of `batch`, in order.
    pub fn evaluate_all(&self, batch: &RecordBatch) -> Result<Vec<bool>> {
        Ok(eval(&self.pred, batch, Rows::All(batch.num_rows()))?
            .into_iter()
            .map(|t| t == Some(true))
            .collect())
    }

    /// Offsets of the rows of `batch` for which the filter is true.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<RoaringBitmap> {
        let truth = eval(&self.pred, batch, Rows::All(batch.num_rows()))?;
        Ok(truth
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == Some(true))
            .map(|(i, _)| i as u32)
            .collect())
    }
}

fn filter_err(message: String) -> Error {
    Error::Filter { message }
}

/// Deepest nesting of parentheses, NOT and alternating AND/OR a filter
/// may have (chains of one operator do not count: they are flattened).
pub const MAX_FILTER_DEPTH: usize = 64;

#[cfg(test)]
mod tests {
    use super::eval::like;
    use super::*;
    use crate::kernel::Metric;
    use std::sync::Arc;

    fn schema() -> Schema {
        Schema::new(vec![
            (
                "v",
                ColumnType::Vector {
                    dim: 2,
                    metric: Metric::L2,
                },
            ),
            ("len", ColumnType::Int64),
            ("score", ColumnType::Float64),
            ("category", ColumnType::Utf8),
            ("flag", ColumnType::Bool),
        ])
        .unwrap()
    }

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![0, 1, 2, 3, 4])) as Arc<dyn Array>,
            ),
            (
                "len",
                Arc::new(Int64Array::from(vec![
                    Some(3),
                    Some(12),
                    None,
                    Some(7),
                    Some(20),
                ])) as _,
            ),
            (
                "score",
                Arc::new(Float64Array::from(vec![0.5, 1.5, 2.5, f64::NAN, -1.0])) as _,
            ),
            (
                "category",
                Arc::new(StringArray::from(vec![
                    Some("noun"),
                    Some("verb"),
                    Some("noun"),
                    None,
                    Some("nounish"),
                ])) as _,
            ),
            (
                "flag",
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    Some(true),
                    Some(false),
                ])) as _,
            ),
        ])
        .unwrap()
    }

    fn rows(sql: &str) -> Vec<u32> {
        Filter::parse(sql, &schema())
            .unwrap()
            .evaluate(&batch())
            .unwrap()
            .iter()
            .collect()
    }

    #[test]
    fn evaluates_with_three_valued_logic() {
        assert_eq!(rows("category = 'noun' AND len < 12"), vec![0]);
        assert_eq!(rows("len >= 7"), vec![1, 3, 4]);
        assert_eq!(rows("NOT (len >= 7)"), vec![0]);
        assert_eq!(rows("12 > len"), vec![0, 3]);
        assert_eq!(rows("len IN (3, 20)"), vec![0, 4]);
        assert_eq!(rows("len NOT IN (3, 20)"), vec![1, 3]);
        assert_eq!(rows("len BETWEEN 7 AND 12"), vec![1, 3]);
        assert_eq!(rows("len NOT BETWEEN 7 AND 12"), vec![0, 4]);
        assert_eq!(rows("len IS NULL"), vec![2]);
        assert_eq!(rows("category IS NOT NULL"), vec![0, 1, 2, 4]);
        assert_eq!(rows("category LIKE 'noun%'"), vec![0, 2, 4]);
        assert_eq!(rows("category LIKE 'n_un'"), vec![0, 2]);
        assert_eq!(rows("category NOT LIKE 'noun%'"), vec![1]);
        assert_eq!(rows("flag"), vec![0, 3]);
        assert_eq!(rows("flag = false OR len IS NULL"), vec![1, 2, 4]);
        assert_eq!(rows("score > 1 OR score < 0"), vec![1, 2, 4]);
        assert_eq!(rows("len != 3"), vec![1, 3, 4]);
        assert_eq!(rows("score < -0.5"), vec![4]);
        assert_eq!(rows("true"), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn evaluating_some_rows_answers_what_evaluating_all_rows_answers_for_them() {
        let sqls = [
            "category = 'noun' AND len < 12",
            "NOT (len >= 7)",
            "len IS NULL OR flag",
            "category LIKE 'n_un' OR score > 1",
            "true",
            "len NOT IN (3, 20) AND NOT flag",
        ];
        let picks: [&[u32]; 4] = [&[], &[4, 0, 2], &[1, 1, 3], &[0, 1, 2, 3, 4]];
        for sql in sqls {
            let f = Filter::parse(sql, &schema()).unwrap();
            let all = f.evaluate(&batch()).unwrap();
            let every: Vec<bool> = (0..5).map(|r| all.contains(r)).collect();
            assert_eq!(f.evaluate_all(&batch()).unwrap(), every, "{sql}");
            for rows in picks {
                let some = f.evaluate_at(&batch(), rows).unwrap();
                let expected: Vec<bool> = rows.iter().map(|&r| all.contains(r)).collect();
                assert_eq!(some, expected, "{sql} at {rows:?}");
            }
        }
        let f = Filter::parse("len < 3", &schema()).unwrap();
        assert!(f.evaluate_at(&batch(), &[5]).is_err(), "a row past the end");
    }

    #[test]
    fn bad_filters_get_clear_errors() {
        let err = |sql: &str| Filter::parse(sql, &schema()).unwrap_err().to_string();
        assert!(
            err("nope = 1").contains("unknown column 'nope' at Line: 1, Column: 1"),
            "{}",
            err("nope = 1")
        );
        assert!(err("len = 'abc'").contains("type mismatch"));
        assert!(err("category = 3").contains("type mismatch"));
        assert!(
            err("len = ").contains("end of the filter"),
            "{}",
            err("len = ")
        );
        assert!(
            err("len = = 3").contains("Line: 1, Column: 7"),
            "{}",
            err("len = = 3")
        );
        assert!(err("len = 1 garbage").contains("unexpected"));
        assert!(err("v = 1").contains("vector column"));
        assert!(err("len = NULL").contains("IS NULL"));
        assert!(err("len = len").contains("literal"));
        assert!(err("").contains("empty"));
        assert!(err("len LIKE 'a%'").contains("utf8"));
    }

    #[test]
    fn the_normal_form_is_the_parsers_rendering() {
        for sql in [
            "len < 20",
            "len  <  20 and category='noun'",
            "(len < 20 OR len > 40) AND NOT category IN ('noun', 'verb')",
            "a_score BETWEEN 0.5 AND 2 OR (len = 3 AND (len = 4 OR len = 5))",
            "NOT (len IS NULL) AND category LIKE 'n%' AND len <> 7",
        ] {
            let dialect = GenericDialect {};
            let expr = Parser::new(&dialect)
                .try_with_sql(sql)
                .unwrap()
                .parse_expr()
                .unwrap();
            assert_eq!(render(&expr), expr.to_string(), "{sql}");
        }
    }

    /// Runs `f` on a thread with a 2 MiB stack, like a server thread's.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn chains_of_100k_terms_work_on_a_2_mib_stack() {
        on_small_stack(|| {
            let and = vec!["len != -1"; 100_000].join(" AND ") + " AND len < 20";
            let f = Filter::parse(&and, &schema()).unwrap();
            assert_eq!(f.columns(), vec!["len"]);
            assert_eq!(
                f.evaluate(&batch()).unwrap(),
                Filter::parse("len < 20", &schema())
                    .unwrap()
                    .evaluate(&batch())
                    .unwrap()
            );
            assert_eq!(f.normalized().len(), and.len());
            let or = vec!["len = -1"; 100_000].join(" OR ") + " OR category = 'noun'";
            let f = Filter::parse(&or, &schema()).unwrap();
            assert_eq!(
                f.evaluate(&batch()).unwrap(),
                Filter::parse("category = 'noun'", &schema())
                    .unwrap()
                    .evaluate(&batch())
                    .unwrap()
            );
            // A long chain followed by garbage is an error, not a crash.
            let bad = vec!["len = 1"; 100_000].join(" AND ") + " garbage";
            assert!(Filter::parse(&bad, &schema()).is_err());
        });
    }

    /// Long chains wherever else a filter can hold them: ended by an
    /// error (sqlparser used to drop the 100,000-node tree it had built, by
    /// recursion), in an unclosed group, as arithmetic, in an IN list, as a
    /// chain of BETWEENs. Each is an error, on a 2 MiB stack (each of these
    /// overflowed it before).
    #[test]
    fn long_chains_anywhere_are_errors_not_overflows() {
        on_small_stack(|| {
            let and = vec!["len = 1"; 100_000].join(" AND ");
            let or = vec!["len = 1"; 100_000].join(" OR ");
            let plus = vec!["1"; 100_000].join(" + ");
            let betweens = vec!["len BETWEEN 1 AND 2"; 50_000].join(" BETWEEN 1 AND ");
            for (sql, needle) in [
                (
                    format!("{and} AND"),
                    "found: EOF (at the end of the filter)",
                ),
                (format!("{or} OR"), "found: EOF (at the end of the filter)"),
                (format!("({and}"), "Expected: ), found: EOF"),
                (format!("NOT ({or} AND )"), "found: ) at Line: 1"),
                (
                    format!("len = {plus} +"),
                    "more than 64 operators in one predicate",
                ),
                (
                    format!("len IN ({and})"),
                    "more than 64 operators in one predicate",
                ),
                (
                    format!("len BETWEEN {plus} AND 3"),
                    "more than 64 operators",
                ),
                (format!("len < 3 AND {betweens}"), "more than 64 operators"),
                (format!("({and}) = 1"), "unexpected '='"),
                (
                    format!("CASE WHEN {and} THEN 1 END = 1"),
                    "'CASE' is not supported in a filter",
                ),
                (format!("len IN [{and}]"), "'[' is not supported"),
                (format!("len = {{'a': {and}}}"), "'{' is not supported"),
                (
                    format!("len = 1 AND CASE WHEN {or}"),
                    "'CASE' is not supported",
                ),
            ] {
                let message = Filter::parse(&sql, &schema()).unwrap_err().to_string();
                assert!(message.contains(needle), "{message}");
            }
        });
    }

    /// The boolean layer builds the tree sqlparser's own `parse_expr`
    /// builds, so the normal form (and the engine's batch keys) are as
    /// before.
    #[test]
    fn the_boolean_layer_builds_sqlparsers_tree() {
        for sql in [
            "len < 20",
            "a OR b AND c OR d",
            "(a OR b) AND (c OR d) AND NOT e",
            "NOT a = 1 AND b",
            "NOT NOT flag OR NOT (len IS NULL)",
            "len BETWEEN 1 AND 5 AND len NOT BETWEEN 2 AND 3 OR x",
            "(len) = 1 AND (len + 1) > 2",
            "((len = 1)) OR (((a AND b)))",
            "len IN (1, -2, 3) AND category NOT LIKE 'n%' AND len IS NOT NULL",
            "a = NOT b AND c",
            "-len < 3 AND x XOR y",
            "(a AND b) = TRUE",
        ] {
            let dialect = GenericDialect {};
            let plain = Parser::new(&dialect)
                .try_with_sql(sql)
                .unwrap()
                .parse_expr()
                .ok();
            match parse_expr(sql) {
                Ok(expr) => assert_eq!(Some(expr), plain, "{sql}"),
                // A group holding a chain is no operand of '='.
                Err(e) => assert!(sql.starts_with("(a AND b) ="), "{sql}: {e}"),
            }
        }
    }

    #[test]
    fn deep_nesting_is_a_clear_error() {
        on_small_stack(|| {
            for depth in [200, 10_000] {
                let sql = "(".repeat(depth) + "len = 1" + &")".repeat(depth);
                let message = Filter::parse(&sql, &schema()).unwrap_err().to_string();
                assert!(message.contains("recursion limit"), "{message}");
                // sqlparser stops at its recursion limit here and reports
                // the next NOT as unexpected: an error, not a crash.
                let nots = "NOT ".repeat(depth) + "len = 1";
                assert!(Filter::parse(&nots, &schema()).is_err());
            }
            let alternating = (0..40).fold("len = 0".to_string(), |acc, i| {
                format!("len = {i} OR (len = {i} AND ({acc}))")
            });
            let message = Filter::parse(&alternating, &schema())
                .unwrap_err()
                .to_string();
            assert!(
                message.contains("recursion limit") || message.contains("nests deeper"),
                "{message}"
            );
        });
    }

    #[test]
    fn like_matches_sql_semantics() {
        let p = |s: &str| s.chars().collect::<Vec<_>>();
        assert!(like("abc", &p("a%")));
        assert!(like("abc", &p("%c")));
        assert!(like("abc", &p("%b%")));
        assert!(like("abc", &p("a_c")));
        assert!(!like("abc", &p("a_")));
        assert!(like("", &p("%")));
        assert!(!like("abd", &p("%c")));
    }
}
