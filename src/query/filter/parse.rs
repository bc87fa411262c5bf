//! Parsing a filter's text into sqlparser's expression tree without deep
//! recursion: the boolean layer (AND, OR, NOT, parentheses) is our loop,
//! sqlparser parses each predicate in between, and runs of operators are
//! bounded first.

use super::*;

/// `sql` as one expression: the tree sqlparser's `parse_expr` gives,
/// with no deep recursion on the way (see [`BooleanLayer`]).
pub(super) fn parse_expr(sql: &str) -> Result<Expr> {
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

pub(super) fn at(ident: &Ident) -> String {
    let p = ident.span.start;
    if p.line > 0 {
        format!(" at Line: {}, Column: {}", p.line, p.column)
    } else {
        String::new()
    }
}

/// Most operators one predicate may hold at one level of parentheses (the
/// text between two commas, or between two ANDs or ORs of the boolean
/// layer); far above any predicate a filter can use.
pub(super) const MAX_PREDICATE_OPERATORS: usize = 64;

/// Refuses a filter that would make sqlparser build a deep tree: sqlparser
/// parses each predicate (see [`BooleanLayer`]), and a long run of
/// operators inside one (`1 + 1 + …`, a chain inside an `IN` list) would
/// be a left-deep tree it drops recursively when it then fails. Walks the
/// tokens as the boolean layer will: a `(` where an operand starts is a
/// group, whose ANDs and ORs (not a BETWEEN's AND) end a predicate.
pub(super) fn bound_operator_runs(tokens: &[TokenWithSpan]) -> Result<()> {
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
pub(super) struct BooleanLayer<'a> {
    parser: Parser<'a>,
    /// sqlparser's precedence of AND: a predicate is what binds tighter.
    and: u8,
    /// Groups and NOTs entered, bounded by [`MAX_FILTER_DEPTH`].
    depth: usize,
}

/// The operands of a chain being parsed, torn down by [`dismantle`] when
/// the parse fails part-way.
pub(super) struct Operands(Vec<Expr>);

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
pub(super) fn chain<'a>(expr: &'a Expr, op: &BinaryOperator) -> Vec<&'a Expr> {
    operands(expr, op, true)
}

/// The operands of the chain of `op` rooted at `expr`, left to right, by a
/// loop; with `through_groups`, a parenthesised sub-chain of the same
/// operator is walked into rather than kept as one operand.
pub(super) fn operands<'a>(
    expr: &'a Expr,
    op: &BinaryOperator,
    through_groups: bool,
) -> Vec<&'a Expr> {
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
pub(super) fn render(expr: &Expr) -> String {
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
pub(super) fn dismantle(expr: Expr) {
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
