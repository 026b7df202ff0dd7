fn main() {
    placer_testkit::build::emit_root_cfg();
}
