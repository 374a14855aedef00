//! Print the guide's table of options (`docs/guide/preload.md`), made
//! from the one definition of each: `cargo run -q -p rxpath-contract
//! --example options-table`.

fn main() {
    print!("{}", rxpath_contract::options::markdown_table());
}
