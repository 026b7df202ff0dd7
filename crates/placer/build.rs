fn main() {
    placer_testkit::build::emit_root_cfg();
    placer_testkit::build::emit_cri_cfg();
}
