//! `tilejit-macros`: the `#[jit]` attribute and the `jit_fn!` macro.
//!
//! Both classify each parameter by its written type: `&Tensor`/`Tensor` are
//! traced tensors; `f32`/`f64` are runtime parameters, which the body sees
//! as rank-0 `&Tensor`s (so changing them never retraces, and like the `f32`
//! they replace they are `Copy`: `x * k + k` works); integers and
//! `bool` are static values that key the cache. Anything else is a compile
//! error that says what is accepted.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_macro_input, FnArg, ItemFn, Pat, ReturnType, Type};

#[derive(Clone, Copy)]
enum Kind {
    Tensor,
    Float,
    Int,
    Bool,
    /// A list or derived struct: several leaves, rebuilt in the body.
    Tree(Tree),
}

/// How a list or struct parameter is written, so the body gets that type.
#[derive(Clone, Copy)]
enum Tree {
    /// `&[T]`: rebuilt as a `Vec<T>`, lent as a slice.
    Slice,
    /// `&X`: rebuilt as an `X`, lent.
    Ref,
    /// `X`: rebuilt and moved.
    Owned,
}

impl Kind {
    fn tokens(self) -> TokenStream2 {
        match self {
            Kind::Tensor => quote!(::tilejit::__private::ArgKind::Tensor),
            Kind::Float => quote!(::tilejit::__private::ArgKind::Float),
            Kind::Int => quote!(::tilejit::__private::ArgKind::Int),
            Kind::Bool => quote!(::tilejit::__private::ArgKind::Bool),
            Kind::Tree(_) => quote!(::tilejit::__private::ArgKind::Tree),
        }
    }
}

struct Param {
    /// Name in the generated outer function.
    outer: syn::Ident,
    /// Pattern for the body (as the user wrote it).
    pat: Pat,
    /// Type as the user wrote it.
    ty: Type,
    /// Type the body receives (floats become `&Tensor`).
    body_ty: Type,
    /// What a list or struct is rebuilt as in the body, before it is lent.
    owner: Option<Type>,
    kind: Kind,
    name: String,
}

fn last_segment(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

const LEAF_INTS: &[&str] = &[
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "usize", "isize",
];

fn classify(ty: &Type) -> syn::Result<Kind> {
    let err = || {
        syn::Error::new(
            ty.span(),
            "jit parameters must be `&Tensor` or `Tensor` (traced), `f32`/`f64` (runtime parameters), \
             an integer type or `bool` (static values that key the cache), or a list or struct of \
             these: `&[Tensor]`, `Vec<Tensor>`, `&Vec<Tensor>`, a `#[derive(JitArgs)]` struct or a \
             reference to one",
        )
    };
    if let Type::Reference(r) = ty {
        if r.mutability.is_some() {
            return Err(err());
        }
        return match (&*r.elem, last_segment(&r.elem).as_deref()) {
            (Type::Slice(_), _) => Ok(Kind::Tree(Tree::Slice)),
            (_, Some("Tensor")) => Ok(Kind::Tensor),
            (_, Some(s)) if !is_scalar(s) => Ok(Kind::Tree(Tree::Ref)),
            _ => Err(err()),
        };
    }
    match last_segment(ty).as_deref() {
        Some("Tensor") => Ok(Kind::Tensor),
        Some("f32" | "f64") => Ok(Kind::Float),
        Some(s) if LEAF_INTS.contains(&s) => Ok(Kind::Int),
        Some("bool") => Ok(Kind::Bool),
        Some(_) => Ok(Kind::Tree(Tree::Owned)),
        _ => Err(err()),
    }
}

/// A Rust scalar type's name.
fn is_scalar(s: &str) -> bool {
    matches!(s, "f32" | "f64" | "bool") || LEAF_INTS.contains(&s)
}

fn param(i: usize, pat: &Pat, ty: &Type) -> syn::Result<Param> {
    let kind = classify(ty)?;
    let (outer, name) = match pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
            (p.ident.clone(), p.ident.to_string())
        }
        _ => (format_ident!("__tilejit_arg{}", i), "_".to_string()),
    };
    let body_ty = match kind {
        Kind::Float => syn::parse_quote_spanned!(ty.span()=> &::tilejit::__private::Tensor),
        _ => ty.clone(),
    };
    let owner = match (kind, ty) {
        (Kind::Tree(Tree::Slice), Type::Reference(r)) => match &*r.elem {
            Type::Slice(s) => {
                let elem = &s.elem;
                Some(syn::parse_quote_spanned!(ty.span()=> ::std::vec::Vec<#elem>))
            }
            _ => None,
        },
        (Kind::Tree(Tree::Ref), Type::Reference(r)) => Some((*r.elem).clone()),
        (Kind::Tree(Tree::Owned), _) => Some(ty.clone()),
        _ => None,
    };
    Ok(Param {
        outer,
        pat: pat.clone(),
        ty: ty.clone(),
        body_ty,
        owner,
        kind,
        name,
    })
}

fn specs(params: &[Param]) -> TokenStream2 {
    let items = params.iter().map(|p| {
        let name = &p.name;
        let kind = p.kind.tokens();
        quote!(::tilejit::__private::param(#name, #kind))
    });
    quote!(&[#(#items),*])
}

/// Whether any parameter is a list or struct (several leaves).
fn has_trees(params: &[Param]) -> bool {
    params.iter().any(|p| matches!(p.kind, Kind::Tree(_)))
}

/// The outer function's argument list, as `ArgValue`s in
/// `__tilejit_args`: a fixed array of one leaf per parameter, or with a
/// list or struct parameter a `Vec` of every leaf.
fn flatten_args(params: &[Param]) -> TokenStream2 {
    if !has_trees(params) {
        let to_args = params.iter().map(|p| {
            let o = &p.outer;
            quote!(::tilejit::__private::JitArg::to_arg(&#o))
        });
        return quote!(let __tilejit_args = [#(#to_args),*];);
    }
    let pushes = params.iter().map(|p| {
        let o = &p.outer;
        quote!(::tilejit::__private::JitArgs::push_args(&#o, &mut __tilejit_args);)
    });
    quote! {
        let mut __tilejit_args = ::std::vec::Vec::new();
        #(#pushes)*
    }
}

/// Statements that rebuild each parameter from `__tilejit_v` (the trace
/// values), and per parameter the expression the body receives.
fn rebuild_args(params: &[Param]) -> (TokenStream2, Vec<TokenStream2>) {
    if !has_trees(params) {
        let exprs = (0..params.len())
            .map(|i| quote!(::tilejit::__private::FromTrace::from_trace(&__tilejit_v[#i])?))
            .collect();
        return (quote!(), exprs);
    }
    let mut stmts =
        quote!(let mut __tilejit_leaves = ::tilejit::__private::Leaves::new(__tilejit_v););
    let mut exprs = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let v = format_ident!("__tilejit_p{}", i);
        match (&p.owner, p.kind) {
            (Some(owner), Kind::Tree(tree)) => {
                stmts.extend(quote! {
                    let #v: #owner = <#owner as ::tilejit::__private::FromLeaves>::from_leaves(&mut __tilejit_leaves)?;
                });
                exprs.push(match tree {
                    Tree::Slice | Tree::Ref => quote!(&#v),
                    Tree::Owned => quote!(#v),
                });
            }
            _ => {
                let t = &p.body_ty;
                stmts.extend(quote! {
                    let #v: #t = ::tilejit::__private::FromTrace::from_trace(__tilejit_leaves.next()?)?;
                });
                exprs.push(quote!(#v));
            }
        }
    }
    stmts.extend(quote!(__tilejit_leaves.finish()?;));
    (stmts, exprs)
}

/// `T` when `ty` is written `Result<T>` or `Result<T, E>`.
fn result_ok_type(ty: &Type) -> Option<Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(a) = &seg.arguments else {
        return None;
    };
    match a.args.first()? {
        syn::GenericArgument::Type(t) => Some(t.clone()),
        _ => None,
    }
}

/// Rewrites `return e` into `return Ok(e)` in a body whose value becomes
/// `Ok(body)`, leaving closures, async blocks and nested items alone
/// (their `return`s are their own).
struct WrapReturns;

impl syn::visit_mut::VisitMut for WrapReturns {
    fn visit_expr_mut(&mut self, e: &mut syn::Expr) {
        match e {
            syn::Expr::Closure(_) | syn::Expr::Async(_) => {}
            syn::Expr::Return(r) => {
                if let Some(v) = &mut r.expr {
                    self.visit_expr_mut(v);
                    let inner = &**v;
                    **v = syn::parse_quote!(::std::result::Result::Ok(#inner));
                }
            }
            _ => syn::visit_mut::visit_expr_mut(self, e),
        }
    }
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Compiles a function of tensors just in time.
///
/// `#[jit] fn f(x: &Tensor, k: f32, n: usize) -> Tensor { .. }` becomes
/// `fn f(x: &Tensor, k: f32, n: usize) -> tilejit::Result<Tensor>` plus a
/// module `f` whose `f::jit()` returns the function's `JitFunction` (handler
/// cache, statistics). The return type is a `Tensor`, a tuple of up to 16,
/// or a `#[derive(JitArgs)]` struct of tensors. Generic functions and
/// methods are not supported.
///
/// Weights are values: a parameter may be `&[Tensor]`, `Vec<Tensor>`,
/// `&Vec<Tensor>` or a `#[derive(JitArgs)]` struct (or a reference to one).
/// Each of its tensors is a leaf of the signature, as is each list's length
/// and each struct's structure key, so another length or layout is another
/// program; the body gets the same type with traced tensors.
///
/// Errors compose with `?`: a body written `-> Tensor` may use `?` (on a
/// nested jit call, which is inlined and returns `Result`), because its
/// value is wrapped in `Ok` (and each `return e` becomes `return Ok(e)`); a
/// body may also be written `-> Result<Tensor>` (or `Result<T, E>` with
/// `E: Into<tilejit::Error>`), and the function still returns
/// `tilejit::Result<Tensor>`. An `Err` from the body fails the call with
/// `Error::Trace`; an op's error inside a nested function fails it naming
/// that op and its line. `let [a, b] = tilejit::args::exactly(xs)?;` takes
/// a list of known length, an error at that line if it is not (indexing
/// would panic, which fails the call as `Error::Panic`).
///
/// Arguments: `mode = host|sim|verify|reference` sets the function's run
/// mode; `dynamic` keys its handler cache on shape classes instead of exact
/// sizes once a dim is seen to vary (automatic dynamic,
/// `JitFunction::make_dynamic`), so new sizes of one class do not retrace:
/// `#[jit(dynamic, mode = sim)]`; `dynamic = all` makes every dim a size
/// symbol from the first call (`JitFunction::make_dynamic_all`).
#[proc_macro_attribute]
pub fn jit(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = TokenStream2::from(attr);
    let attrs = match parse_attrs(attr) {
        Ok(a) => a,
        Err(e) => return e.to_compile_error().into(),
    };
    let func = parse_macro_input!(item as ItemFn);
    match expand_jit(func, attrs) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What `#[jit(..)]` was given.
#[derive(Default)]
struct JitAttrs {
    /// `mode = host|sim|verify|reference`.
    mode: Option<TokenStream2>,
    /// `dynamic`: key on shape classes (automatic); `dynamic = all`:
    /// every dim a symbol.
    dynamic: Option<bool>,
}

const ATTR_HELP: &str =
    "#[jit] takes `mode = host|sim|verify|reference` and `dynamic` (or `dynamic = all`)";

/// `#[jit(mode = sim, dynamic)]`: the arguments in any order, each once.
fn parse_attrs(attr: TokenStream2) -> syn::Result<JitAttrs> {
    use syn::parse::Parser;
    let mut out = JitAttrs::default();
    if attr.is_empty() {
        return Ok(out);
    }
    let metas = syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated
        .parse2(attr.clone())
        .map_err(|_| syn::Error::new(attr.span(), ATTR_HELP))?;
    for meta in metas {
        match meta {
            syn::Meta::Path(p) if p.is_ident("dynamic") && out.dynamic.is_none() => {
                out.dynamic = Some(false)
            }
            syn::Meta::NameValue(nv)
                if nv.path.is_ident("dynamic")
                    && out.dynamic.is_none()
                    && matches!(&nv.value, syn::Expr::Path(p) if p.path.is_ident("all")) =>
            {
                out.dynamic = Some(true)
            }
            syn::Meta::NameValue(nv) if nv.path.is_ident("mode") && out.mode.is_none() => {
                out.mode = Some(parse_mode(&nv)?)
            }
            other => return Err(syn::Error::new(other.span(), ATTR_HELP)),
        }
    }
    Ok(out)
}

/// `mode = host|sim|verify|reference`.
fn parse_mode(nv: &syn::MetaNameValue) -> syn::Result<TokenStream2> {
    let name = match &nv.value {
        syn::Expr::Path(p) if p.path.segments.len() == 1 => p.path.segments[0].ident.to_string(),
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => s.value(),
        other => {
            return Err(syn::Error::new(
                other.span(),
                "expected host, sim, verify or reference",
            ))
        }
    };
    let variant = match name.to_ascii_lowercase().as_str() {
        "host" => quote!(Host),
        "sim" => quote!(Sim),
        "verify" => quote!(Verify),
        "reference" => quote!(Reference),
        _ => {
            return Err(syn::Error::new(
                nv.value.span(),
                format!("unknown run mode `{name}`: expected host, sim, verify or reference"),
            ))
        }
    };
    Ok(quote!(::tilejit::__private::RunMode::#variant))
}

/// A `#[jit]` function's signature checked (not generic, not async, not a
/// method, with a return type): its return type and parameters.
fn checked_signature(sig: &syn::Signature) -> syn::Result<(Type, Vec<Param>)> {
    if let Some(g) = sig.generics.params.first() {
        return Err(syn::Error::new(
            g.span(),
            "#[jit] functions cannot be generic: the signature must name concrete types",
        ));
    }
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new(
            a.span(),
            "#[jit] functions cannot be async",
        ));
    }
    let ret: Type = match &sig.output {
        ReturnType::Type(_, t) => (**t).clone(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.span(),
                "#[jit] functions must return a Tensor or a tuple of Tensors",
            ));
        }
    };
    let mut params = Vec::new();
    for (i, input) in sig.inputs.iter().enumerate() {
        match input {
            FnArg::Typed(pt) => params.push(param(i, &pt.pat, &pt.ty)?),
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "#[jit] is for free functions; methods are not supported",
                ));
            }
        }
    }
    Ok((ret, params))
}

/// The body as an inner function `__tilejit_body`, with the type its
/// caller gets in `Ok` and the expression calling it on `from`. A body
/// written `-> Result<T>` returns its own errors; any other body is
/// wrapped so `?` works in it (on a nested jit call, say): its value
/// becomes `Ok(value)` and each `return e` becomes `return Ok(e)`.
fn wrap_body(
    ret: &Type,
    inner: &[TokenStream2],
    block: &syn::Block,
    from: &[TokenStream2],
) -> (Type, TokenStream2, TokenStream2) {
    match result_ok_type(ret) {
        Some(t) => (
            t,
            quote!(fn __tilejit_body(#(#inner),*) -> #ret #block),
            quote!(__tilejit_body(#(#from),*).map_err(::std::convert::Into::<::tilejit::__private::Error>::into)?),
        ),
        None => {
            let mut block = block.clone();
            syn::visit_mut::VisitMut::visit_block_mut(&mut WrapReturns, &mut block);
            (
                ret.clone(),
                quote!(fn __tilejit_body(#(#inner),*) -> ::tilejit::__private::Result<#ret> {
                    ::std::result::Result::Ok(#block)
                }),
                quote!(__tilejit_body(#(#from),*)?),
            )
        }
    }
}

fn expand_jit(func: ItemFn, jit_attrs: JitAttrs) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
    let (ret, params) = checked_signature(sig)?;
    let attrs = &func.attrs;
    let vis = &func.vis;
    let name = &sig.ident;
    let block = &func.block;
    let outer = params.iter().map(|p| {
        let (o, t) = (&p.outer, &p.ty);
        quote!(#o: #t)
    });
    let inner: Vec<TokenStream2> = params
        .iter()
        .map(|p| {
            let (pat, t) = (&p.pat, &p.body_ty);
            quote!(#pat: #t)
        })
        .collect();
    let flatten = flatten_args(&params);
    let (rebuild, from) = rebuild_args(&params);
    let (out_ty, body_fn, call_body) = wrap_body(&ret, &inner, block, &from);
    let specs = specs(&params);
    // The function's identity besides its name and module path: a digest
    // of its signature and body as tokens, so a snapshot saved from
    // another function of the same name (or an edited one) is refused.
    let body_digest = token_digest(&quote!(#sig #block));
    let mod_doc = format!("The jit function behind [`{name}()`]: handler cache and statistics.");
    let set_mode = match jit_attrs.mode {
        Some(m) => quote!(f.set_mode(::std::option::Option::Some(#m));),
        None => quote!(),
    };
    let make_dynamic = match jit_attrs.dynamic {
        Some(false) => quote!(f.make_dynamic();),
        Some(true) => quote!(f.make_dynamic_all();),
        None => quote!(),
    };
    // The body, packed (trace values in, tensors out), is an item beside
    // the function, so both the function and `#name::jit()` (an
    // associated function of a type named like it: unlike a module's, its
    // body sees items local to the block the function is in) can name it,
    // and the registry can call it by name.
    let packed = quote::format_ident!("__tilejit_packed_{}", name);
    let cfgs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("cfg")).collect();
    Ok(quote! {
        #(#attrs)*
        #[track_caller]
        #vis fn #name(#(#outer),*) -> ::tilejit::__private::Result<#out_ty> {
            #flatten
            let __tilejit_out = #name::jit().call(&__tilejit_args, &#packed)?;
            <#out_ty as ::tilejit::__private::JitOutput>::from_tensors(__tilejit_out)
        }

        #(#cfgs)*
        #[doc(hidden)]
        #[allow(non_snake_case, clippy::all, unused_mut, unused_variables, unreachable_code)]
        fn #packed(
            __tilejit_v: &[::tilejit::__private::TraceValue],
        ) -> ::tilejit::__private::Result<::std::vec::Vec<::tilejit::__private::Tensor>> {
            #body_fn
            #rebuild
            ::std::result::Result::Ok(::tilejit::__private::JitOutput::into_tensors(#call_body))
        }

        #(#cfgs)*
        #[doc = #mod_doc]
        #[allow(non_camel_case_types)]
        #vis struct #name {
            _private: (),
        }

        #(#cfgs)*
        impl #name {
            /// The `JitFunction` (handler cache, statistics) of this jit function.
            pub fn jit() -> &'static ::tilejit::__private::JitFunction {
                static FUNCTION: ::std::sync::OnceLock<::tilejit::__private::JitFunction> = ::std::sync::OnceLock::new();
                FUNCTION.get_or_init(|| {
                    let mut f = ::tilejit::__private::JitFunction::with_identity(
                        stringify!(#name),
                        ::std::module_path!(),
                        #body_digest,
                        concat!(file!(), ":", line!()),
                        #specs,
                    );
                    f.set_body(#packed);
                    #set_mode
                    #make_dynamic
                    f
                })
            }
        }
    })
}

/// Compiles a closure of tensors just in time: `jit_fn!(|a: &Tensor, b: &Tensor| a * b)`
/// gives a `JitFn` called as `f.call((&a, &b))` (a tuple of up to 16
/// arguments). Parameters need type annotations (same rules as `#[jit]`).
/// Captured tensors become constants.
#[proc_macro]
pub fn jit_fn(input: TokenStream) -> TokenStream {
    let closure = parse_macro_input!(input as syn::ExprClosure);
    match expand_jit_fn(closure) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand_jit_fn(c: syn::ExprClosure) -> syn::Result<TokenStream2> {
    let mut params = Vec::new();
    for (i, input) in c.inputs.iter().enumerate() {
        match input {
            Pat::Type(pt) => params.push(param(i, &pt.pat, &pt.ty)?),
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "jit_fn! parameters need type annotations, e.g. `|x: &Tensor, k: f32|`",
                ));
            }
        }
    }
    let capture = &c.capture;
    let body = &c.body;
    let (rebuild, from) = rebuild_args(&params);
    let lets = params.iter().zip(&from).map(|(p, e)| {
        let (pat, t) = (&p.pat, &p.body_ty);
        quote_spanned!(Span::call_site()=> let #pat: #t = #e;)
    });
    let result = match &c.output {
        ReturnType::Type(_, t) => quote!({ let __tilejit_r: #t = #body; __tilejit_r }),
        ReturnType::Default => quote!(#body),
    };
    let specs = specs(&params);
    let body_digest = token_digest(&quote!(#c));
    Ok(quote! {
        ::tilejit::__private::JitFn::with_identity(
            concat!("jit_fn@", file!(), ":", line!()),
            ::std::module_path!(),
            #body_digest,
            concat!(file!(), ":", line!()),
            #specs,
            #capture |__tilejit_v: &[::tilejit::__private::TraceValue]| -> ::tilejit::__private::Result<_> {
                #rebuild
                #(#lets)*
                ::std::result::Result::Ok(#result)
            },
        )
    })
}

/// A jit function's body digest: FNV-1a over its tokens as text, twice
/// (the second pass over the text reversed), as 32 hex digits. It tells
/// functions and edits apart; it is no defence against a forger (who
/// could as well write the graphs a snapshot holds).
fn token_digest(tokens: &TokenStream2) -> String {
    let text = tokens.to_string();
    let reversed: String = text.chars().rev().collect();
    format!("{:016x}{:016x}", fnv1a(&text), fnv1a(&reversed))
}

/// FNV-1a, 64 bits: a derived struct's structure key.
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `#[derive(JitArgs)]`: a struct of tensors as one jit argument (and
/// result). See `tilejit::JitArgs` (the trait) for the docs.
#[proc_macro_derive(JitArgs)]
pub fn derive_jit_args(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as syn::DeriveInput);
    match expand_derive(input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand_derive(input: syn::DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    if let Some(g) = input.generics.params.first() {
        return Err(syn::Error::new(
            g.span(),
            "#[derive(JitArgs)] structs cannot be generic",
        ));
    }
    let fields = match &input.data {
        syn::Data::Struct(syn::DataStruct {
            fields: syn::Fields::Named(f),
            ..
        }) => &f.named,
        _ => {
            return Err(syn::Error::new(
                name.span(),
                "#[derive(JitArgs)] is for structs with named fields",
            ))
        }
    };
    let mut text = format!("{name}{{");
    let mut pushes = Vec::new();
    let mut takes = Vec::new();
    let mut out_pushes = Vec::new();
    let mut out_takes = Vec::new();
    let mut outputs = true;
    for f in fields {
        let Some(id) = &f.ident else { continue };
        let ty = &f.ty;
        text.push_str(&format!("{id}:{},", quote!(#ty)));
        let seg = last_segment(ty);
        let float = matches!(seg.as_deref(), Some("f32" | "f64"));
        if float {
            pushes.push(quote!(::tilejit::__private::StaticFloat::push_static(&self.#id, out);));
            takes.push(
                quote!(#id: <#ty as ::tilejit::__private::StaticFloat>::from_static(leaves)?,),
            );
        } else {
            pushes.push(quote!(::tilejit::__private::JitArgs::push_args(&self.#id, out);));
            takes.push(
                quote!(#id: <#ty as ::tilejit::__private::FromLeaves>::from_leaves(leaves)?,),
            );
        }
        // Only tensors and structs can be results: a list's length or a
        // static value could not be rebuilt from a program's outputs.
        match seg.as_deref() {
            Some(s) if !is_scalar(s) && s != "Vec" && !matches!(ty, Type::Reference(_)) => {
                out_pushes
                    .push(quote!(::tilejit::__private::JitOutput::push_tensors(self.#id, out);));
                out_takes
                    .push(quote!(#id: <#ty as ::tilejit::__private::JitOutput>::take_from(v)?,));
            }
            _ => outputs = false,
        }
    }
    text.push('}');
    let key = fnv1a(&text);
    let name_str = name.to_string();
    let output_impl = match outputs {
        true => quote! {
            impl ::tilejit::__private::JitOutput for #name {
                fn into_tensors(self) -> ::std::vec::Vec<::tilejit::__private::Tensor> {
                    let mut out = ::std::vec::Vec::new();
                    ::tilejit::__private::JitOutput::push_tensors(self, &mut out);
                    out
                }
                fn from_tensors(v: ::tilejit::__private::Outputs) -> ::tilejit::__private::Result<Self> {
                    let mut v = v;
                    let s = <Self as ::tilejit::__private::JitOutput>::take_from(&mut v)?;
                    v.finish()?;
                    ::std::result::Result::Ok(s)
                }
                fn push_tensors(self, out: &mut ::std::vec::Vec<::tilejit::__private::Tensor>) {
                    #(#out_pushes)*
                }
                fn take_from(v: &mut ::tilejit::__private::Outputs) -> ::tilejit::__private::Result<Self> {
                    ::std::result::Result::Ok(#name { #(#out_takes)* })
                }
            }
        },
        false => quote!(),
    };
    Ok(quote! {
        impl ::tilejit::__private::JitArgs for #name {
            fn push_args<'a>(&'a self, out: &mut ::std::vec::Vec<::tilejit::__private::ArgValue<'a>>) {
                out.push(::tilejit::__private::ArgValue::Mark(::tilejit::__private::Mark::Struct(#key)));
                #(#pushes)*
            }
        }
        impl ::tilejit::__private::FromLeaves for #name {
            fn from_leaves(leaves: &mut ::tilejit::__private::Leaves<'_>) -> ::tilejit::__private::Result<Self> {
                leaves.expect_key(#key, #name_str)?;
                ::std::result::Result::Ok(#name { #(#takes)* })
            }
        }
        #output_impl
    })
}
