//! Filters: SQL boolean expressions over scalar columns.
//!
//! Parsed with `sqlparser`, then compiled against a schema into a small
//! predicate tree (columns resolved, types checked), then evaluated per
//! fragment into a bitmap of matching row offsets. Evaluation follows SQL's
//! three-valued logic: a comparison with NULL is unknown, and only rows whose
//! predicate is *true* match.
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

/// `sql` as one expression: the tree sqlparser's `parse_expr` gives,
/// with no deep recursion on the way (see [`BooleanLayer`]).
fn parse_expr(sql: &str) -> Result<Expr> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| Error::Filter {
            message: ParserError::from(e).to_string(),
        })?;
    bound_operator_runs(&tokens)?;
    let mut layer = BooleanLayer {
        parser: Parser::new(&dialect).with_tokens_with_locations(tokens),
        and: dialect.prec_value(Precedence::And),
        depth: 0,
    };
    let expr = layer.parse_or().map_err(|e| {
        let message = e.to_string();
        Error::Filter {
            message: if message.contains("Line:") || e == ParserError::RecursionLimitExceeded {
                message
            } else {
                format!("{message} (at the end of the filter)")
            },
        }
    })?;
    let next = layer.parser.peek_token();
    if next.token != Token::EOF {
        dismantle(expr);
        return Err(Error::Filter {
            message: format!(
                "unexpected '{}' at Line: {}, Column: {}",
                next.token, next.span.start.line, next.span.start.column
            ),
        });
    }
    Ok(expr)
}

fn filter_err(message: String) -> Error {
    Error::Filter { message }
}

fn at(ident: &Ident) -> String {
    let p = ident.span.start;
    if p.line > 0 {
        format!(" at Line: {}, Column: {}", p.line, p.column)
    } else {
        String::new()
    }
}

fn column_of<'a>(expr: &'a Expr, schema: &'a Schema) -> Result<Option<(&'a str, &'a ColumnType)>> {
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

fn literal_of(expr: &Expr) -> Result<Option<Literal>> {
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
fn check_type(column: &str, ty: &ColumnType, lit: &Literal) -> Result<()> {
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

fn column_and_literal(
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

/// Deepest nesting of parentheses, NOT and alternating AND/OR a filter
/// may have (chains of one operator do not count: they are flattened).
pub const MAX_FILTER_DEPTH: usize = 64;

/// Most operators one predicate may hold at one level of parentheses (the
/// text between two commas, or between two ANDs or ORs of the boolean
/// layer); far above any predicate a filter can use.
const MAX_PREDICATE_OPERATORS: usize = 64;

/// Refuses a filter that would make sqlparser build a deep tree: sqlparser
/// parses each predicate (see [`BooleanLayer`]), and a long run of
/// operators inside one (`1 + 1 + …`, a chain inside an `IN` list) would
/// be a left-deep tree it drops recursively when it then fails. Walks the
/// tokens as the boolean layer will: a `(` where an operand starts is a
/// group, whose ANDs and ORs (not a BETWEEN's AND) end a predicate.
fn bound_operator_runs(tokens: &[TokenWithSpan]) -> Result<()> {
    struct Level {
        group: bool,
        operators: usize,
        open_betweens: usize,
    }
    let mut levels = vec![Level {
        group: true,
        operators: 0,
        open_betweens: 0,
    }];
    let mut operand_start = true;
    for t in tokens {
        match &t.token {
            Token::Whitespace(_) => continue,
            Token::LParen => {
                levels.push(Level {
                    group: operand_start,
                    operators: 0,
                    open_betweens: 0,
                });
                continue;
            }
            Token::RParen if levels.len() > 1 => {
                levels.pop();
                operand_start = false;
                continue;
            }
            _ => {}
        }
        let depth = levels.len() - 1;
        let level = &mut levels[depth];
        let keyword = match &t.token {
            Token::Word(w) if w.quote_style.is_none() => w.keyword,
            _ => Keyword::NoKeyword,
        };
        // Syntax in which sqlparser parses whole expressions without a
        // parenthesis (CASE … END, [ ], { }) would escape the bound on
        // boolean chains below, and a filter has no use for it.
        let unsupported = matches!(
            t.token,
            Token::LBracket | Token::RBracket | Token::LBrace | Token::RBrace
        ) || matches!(
            keyword,
            Keyword::CASE | Keyword::WHEN | Keyword::THEN | Keyword::ELSE | Keyword::END
        );
        if unsupported {
            let at = t.span.start;
            return Err(filter_err(format!(
                "'{}' is not supported in a filter (Line: {}, Column: {}); a filter compares \
                 columns with literals, joined by AND, OR and NOT",
                t.token, at.line, at.column
            )));
        }
        let counts = match &t.token {
            Token::RParen => false,
            Token::Comma => {
                level.operators = 0;
                false
            }
            _ if keyword == Keyword::NOT && operand_start => continue,
            _ if level.group
                && (keyword == Keyword::OR
                    || (keyword == Keyword::AND && level.open_betweens == 0)) =>
            {
                level.operators = 0;
                operand_start = true;
                continue;
            }
            _ if level.group && keyword == Keyword::AND => {
                level.open_betweens -= 1;
                true
            }
            _ if level.group && keyword == Keyword::BETWEEN => {
                level.open_betweens += 1;
                true
            }
            Token::Word(_) => keyword != Keyword::NoKeyword,
            Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::HexStringLiteral(_) => false,
            _ => true,
        };
        operand_start = false;
        if counts {
            level.operators += 1;
            if level.operators > MAX_PREDICATE_OPERATORS {
                let at = t.span.start;
                return Err(filter_err(format!(
                    "more than {MAX_PREDICATE_OPERATORS} operators in one predicate at Line: \
                     {}, Column: {} (a filter compares columns with literals)",
                    at.line, at.column
                )));
            }
        }
    }
    Ok(())
}

/// The boolean layer of a filter (AND, OR, NOT, grouping parentheses),
/// parsed with loops; sqlparser parses each predicate in between, on the
/// same tokens, so its error messages and the tree are the ones a plain
/// `parse_expr` gives. A chain is kept as a list of operands until it is
/// complete, so a parse failing after 100,000 terms tears them down without
/// recursion, where sqlparser would drop its left-deep tree recursively.
struct BooleanLayer<'a> {
    parser: Parser<'a>,
    /// sqlparser's precedence of AND: a predicate is what binds tighter.
    and: u8,
    /// Groups and NOTs entered, bounded by [`MAX_FILTER_DEPTH`].
    depth: usize,
}

/// The operands of a chain being parsed, torn down by [`dismantle`] when
/// the parse fails part-way.
struct Operands(Vec<Expr>);

impl Drop for Operands {
    fn drop(&mut self) {
        self.0.drain(..).for_each(dismantle);
    }
}

impl Operands {
    /// The chain as sqlparser builds it: `((a op b) op c) …`.
    fn into_chain(mut self, op: BinaryOperator) -> Expr {
        let mut chain: Option<Expr> = None;
        for e in std::mem::take(&mut self.0) {
            chain = Some(match chain {
                None => e,
                Some(left) => Expr::BinaryOp {
                    left: Box::new(left),
                    op: op.clone(),
                    right: Box::new(e),
                },
            });
        }
        chain.unwrap_or(Expr::Value(Value::Boolean(true).into()))
    }
}

impl BooleanLayer<'_> {
    fn parse_or(&mut self) -> Result<Expr, ParserError> {
        let mut operands = Operands(vec![self.parse_and()?]);
        while self.parser.parse_keyword(Keyword::OR) {
            operands.0.push(self.parse_and()?);
        }
        Ok(operands.into_chain(BinaryOperator::Or))
    }

    fn parse_and(&mut self) -> Result<Expr, ParserError> {
        let mut operands = Operands(vec![self.parse_operand()?]);
        while self.parser.parse_keyword(Keyword::AND) {
            operands.0.push(self.parse_operand()?);
        }
        Ok(operands.into_chain(BinaryOperator::And))
    }

    /// `NOT operand`, `( … )` or a predicate.
    fn parse_operand(&mut self) -> Result<Expr, ParserError> {
        if self.depth >= MAX_FILTER_DEPTH {
            return Err(ParserError::RecursionLimitExceeded);
        }
        self.depth += 1;
        let operand = self.parse_operand_inner();
        self.depth -= 1;
        operand
    }

    fn parse_operand_inner(&mut self) -> Result<Expr, ParserError> {
        if self.parser.peek_keyword(Keyword::NOT) {
            self.parser.next_token();
            return Ok(Expr::UnaryOp {
                op: UnaryOperator::Not,
                expr: Box::new(self.parse_operand()?),
            });
        }
        if self.parser.peek_token().token != Token::LParen {
            return self.parser.parse_subexpr(self.and);
        }
        self.parser.next_token();
        let inner = self.parse_or()?;
        if let Err(e) = self.parser.expect_token(&Token::RParen) {
            dismantle(inner);
            return Err(e);
        }
        let chain = matches!(
            &inner,
            Expr::BinaryOp {
                op: BinaryOperator::And | BinaryOperator::Or,
                ..
            }
        );
        let mut expr = Expr::Nested(Box::new(inner));
        // `(len) = 1`: sqlparser goes on with the operators that bind
        // tighter than AND. A group holding a chain is no operand (what
        // follows is reported as unexpected).
        while !chain && self.parser.peek_token().token != Token::Period {
            let precedence = self.parser.get_next_precedence()?;
            if precedence <= self.and {
                break;
            }
            expr = self.parser.parse_infix(expr, precedence)?;
        }
        Ok(expr)
    }
}

/// The operands of the chain of `op` rooted at `expr`, left to right,
/// found with a loop (the parser builds `a AND b AND c` left-deep);
/// parenthesised sub-chains of the same operator join the chain.
fn chain<'a>(expr: &'a Expr, op: &BinaryOperator) -> Vec<&'a Expr> {
    operands(expr, op, true)
}

/// The operands of the chain of `op` rooted at `expr`, left to right, by a
/// loop; with `through_groups`, a parenthesised sub-chain of the same
/// operator is walked into rather than kept as one operand.
fn operands<'a>(expr: &'a Expr, op: &BinaryOperator, through_groups: bool) -> Vec<&'a Expr> {
    let mut operands = Vec::new();
    let mut pending = vec![expr];
    while let Some(e) = pending.pop() {
        match e {
            Expr::BinaryOp {
                left,
                op: this,
                right,
            } if this == op => {
                pending.push(right);
                pending.push(left);
            }
            Expr::Nested(inner)
                if through_groups
                    && matches!(&**inner, Expr::BinaryOp { op: this, .. } if this == op) =>
            {
                pending.push(inner);
            }
            other => operands.push(other),
        }
    }
    operands
}

/// The filter's normal form: sqlparser's rendering, with chains of one
/// operator rendered by a loop (sqlparser's `Display` recurses once per
/// term). Parentheses are kept as written.
fn render(expr: &Expr) -> String {
    match expr {
        Expr::BinaryOp { op, .. } if matches!(op, BinaryOperator::And | BinaryOperator::Or) => {
            operands(expr, op, false)
                .into_iter()
                .map(render)
                .collect::<Vec<_>>()
                .join(&format!(" {op} "))
        }
        Expr::Nested(inner) => format!("({})", render(inner)),
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => format!("NOT {}", render(expr)),
        other => other.to_string(),
    }
}

/// Drops a parsed expression without recursion (dropping a left-deep chain
/// of 100,000 boxed nodes recursively would overflow the stack).
fn dismantle(expr: Expr) {
    let mut pending = vec![expr];
    while let Some(e) = pending.pop() {
        match e {
            Expr::BinaryOp { left, right, .. } => {
                pending.push(*left);
                pending.push(*right);
            }
            Expr::Nested(inner) => pending.push(*inner),
            Expr::UnaryOp { expr, .. } => pending.push(*expr),
            _ => {}
        }
    }
}

fn compile(expr: &Expr, schema: &Schema, depth: usize) -> Result<Pred> {
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

/// SQL LIKE: `%` matches any run of characters, `_` exactly one.
fn like(text: &str, pattern: &[char]) -> bool {
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

type Truth = Vec<Option<bool>>;

/// The rows of a batch an evaluation covers: all of them, or some.
#[derive(Clone, Copy)]
enum Rows<'a> {
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

fn compare_literal(value: &Literal, row: RowValue<'_>) -> Option<std::cmp::Ordering> {
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
enum RowValue<'a> {
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
}

/// Calls `f` with each covered row's value of `column` (None for NULL).
fn map_column(
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

fn eval(pred: &Pred, batch: &RecordBatch, rows: Rows<'_>) -> Result<Truth> {
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
fn fold(
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

#[cfg(test)]
mod tests {
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
