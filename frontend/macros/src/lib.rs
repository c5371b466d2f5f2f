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
}

impl Kind {
    fn tokens(self) -> TokenStream2 {
        match self {
            Kind::Tensor => quote!(::tilejit::ArgKind::Tensor),
            Kind::Float => quote!(::tilejit::ArgKind::Float),
            Kind::Int => quote!(::tilejit::ArgKind::Int),
            Kind::Bool => quote!(::tilejit::ArgKind::Bool),
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
    kind: Kind,
    name: String,
}

fn last_segment(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

fn classify(ty: &Type) -> syn::Result<Kind> {
    let err = || {
        syn::Error::new(
            ty.span(),
            "jit parameters must be `&Tensor` or `Tensor` (traced), `f32`/`f64` (runtime parameters), \
             an integer type or `bool` (static values that key the cache)",
        )
    };
    if let Type::Reference(r) = ty {
        return match last_segment(&r.elem).as_deref() {
            Some("Tensor") if r.mutability.is_none() => Ok(Kind::Tensor),
            _ => Err(err()),
        };
    }
    match last_segment(ty).as_deref() {
        Some("Tensor") => Ok(Kind::Tensor),
        Some("f32" | "f64") => Ok(Kind::Float),
        Some("i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize") => {
            Ok(Kind::Int)
        }
        Some("bool") => Ok(Kind::Bool),
        _ => Err(err()),
    }
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
        Kind::Float => syn::parse_quote_spanned!(ty.span()=> &::tilejit::Tensor),
        _ => ty.clone(),
    };
    Ok(Param {
        outer,
        pat: pat.clone(),
        ty: ty.clone(),
        body_ty,
        kind,
        name,
    })
}

fn specs(params: &[Param]) -> TokenStream2 {
    let items = params.iter().map(|p| {
        let name = &p.name;
        let kind = p.kind.tokens();
        quote!(::tilejit::jit::param(#name, #kind))
    });
    quote!(&[#(#items),*])
}

/// Compiles a function of tensors just in time.
///
/// `#[jit] fn f(x: &Tensor, k: f32, n: usize) -> Tensor { .. }` becomes
/// `fn f(x: &Tensor, k: f32, n: usize) -> tilejit::Result<Tensor>` plus a
/// module `f` whose `f::jit()` returns the function's `JitFunction` (handler
/// cache, statistics). The return type is a `Tensor` or a tuple of up to 16.
/// Generic functions and methods are not supported.
///
/// Arguments: `mode = host|sim|verify|reference` sets the function's run
/// mode; `dynamic` keys its handler cache on shape classes instead of exact
/// sizes (`JitFunction::set_dynamic`), so new sizes of one class do not
/// retrace: `#[jit(dynamic, mode = sim)]`.
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
    /// `dynamic`: key on shape classes.
    dynamic: bool,
}

const ATTR_HELP: &str = "#[jit] takes `mode = host|sim|verify|reference` and `dynamic`";

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
            syn::Meta::Path(p) if p.is_ident("dynamic") && !out.dynamic => out.dynamic = true,
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
    Ok(quote!(::tilejit::RunMode::#variant))
}

fn expand_jit(func: ItemFn, jit_attrs: JitAttrs) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
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
    let attrs = &func.attrs;
    let vis = &func.vis;
    let name = &sig.ident;
    let block = &func.block;
    let outer = params.iter().map(|p| {
        let (o, t) = (&p.outer, &p.ty);
        quote!(#o: #t)
    });
    let inner = params.iter().map(|p| {
        let (pat, t) = (&p.pat, &p.body_ty);
        quote!(#pat: #t)
    });
    let to_args = params.iter().map(|p| {
        let o = &p.outer;
        quote!(::tilejit::JitArg::to_arg(&#o))
    });
    let from =
        (0..params.len()).map(|i| quote!(::tilejit::FromTrace::from_trace(&__tilejit_v[#i])?));
    let specs = specs(&params);
    let mod_doc = format!("The jit function behind [`{name}()`]: handler cache and statistics.");
    let set_mode = match jit_attrs.mode {
        Some(m) => quote!(f.set_mode(::std::option::Option::Some(#m));),
        None => quote!(),
    };
    let set_dynamic = match jit_attrs.dynamic {
        true => quote!(f.set_dynamic(true);),
        false => quote!(),
    };
    Ok(quote! {
        #(#attrs)*
        #[track_caller]
        #vis fn #name(#(#outer),*) -> ::tilejit::Result<#ret> {
            #[allow(clippy::all, unused_mut, unused_variables)]
            fn __tilejit_body(#(#inner),*) -> #ret #block
            let __tilejit_args = [#(#to_args),*];
            let __tilejit_out = #name::jit().call(
                &__tilejit_args,
                &|__tilejit_v: &[::tilejit::TraceValue]| -> ::tilejit::Result<::std::vec::Vec<::tilejit::Tensor>> {
                    ::std::result::Result::Ok(::tilejit::JitOutput::into_tensors(__tilejit_body(#(#from),*)))
                },
            )?;
            <#ret as ::tilejit::JitOutput>::from_tensors(__tilejit_out)
        }

        #[doc = #mod_doc]
        #vis mod #name {
            /// The `JitFunction` (handler cache, statistics) of this jit function.
            pub fn jit() -> &'static ::tilejit::JitFunction {
                static FUNCTION: ::std::sync::OnceLock<::tilejit::JitFunction> = ::std::sync::OnceLock::new();
                FUNCTION.get_or_init(|| {
                    let f = ::tilejit::JitFunction::new(stringify!(#name), concat!(file!(), ":", line!()), #specs);
                    #set_mode
                    #set_dynamic
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
    let lets = params.iter().enumerate().map(|(i, p)| {
        let (pat, t) = (&p.pat, &p.body_ty);
        quote_spanned!(Span::call_site()=> let #pat: #t = ::tilejit::FromTrace::from_trace(&__tilejit_v[#i])?;)
    });
    let result = match &c.output {
        ReturnType::Type(_, t) => quote!({ let __tilejit_r: #t = #body; __tilejit_r }),
        ReturnType::Default => quote!(#body),
    };
    let specs = specs(&params);
    Ok(quote! {
        ::tilejit::JitFn::new(
            concat!("jit_fn@", file!(), ":", line!()),
            concat!(file!(), ":", line!()),
            #specs,
            #capture |__tilejit_v: &[::tilejit::TraceValue]| -> ::tilejit::Result<_> {
                #(#lets)*
                ::std::result::Result::Ok(#result)
            },
        )
    })
}
