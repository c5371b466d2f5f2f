; fusion/softmax_rows.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_reduce_max_sub_exp_reduce_sum_div (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_fused_reduce_max_sub_exp_reduce_sum_div aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L61
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 0
    ld f32, 1x8168, 1, r2, @0x0, b0_0, r5, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vrmax f32, 1x8168, 1, r2, @0x17f00, @0x0
    vbrow f32, 1x8168, 1, r27, @0x7fa0, @0x17f00
    vsub f32, 1x8168, 1, r27, @0xff40, @0x0, @0x7fa0
    vunary f32, 1x8168, 1, r27, @0x7fa0, @0xff40, exp
    vrsum f32, 1x8168, 1, r2, @0x17f20, @0x7fa0
    vbrow f32, 1x8168, 1, r27, @0xff40, @0x17f20
    vdiv f32, 1x8168, 1, r27, @0x0, @0x7fa0, @0xff40
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x8168, 1, r2, b1_1, r6, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L61
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 8
    ldarg r6, 9
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    waitf mte3, mte2, 1
    ld f32, 1x8168, 1, r2, @0x17fc0, b0_0, r5, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vrmax f32, 1x8168, 1, r2, @0x2fec0, @0x17fc0
    vbrow f32, 1x8168, 1, r27, @0x1ff60, @0x2fec0
    vsub f32, 1x8168, 1, r27, @0x27f00, @0x17fc0, @0x1ff60
    vunary f32, 1x8168, 1, r27, @0x1ff60, @0x27f00, exp
    vrsum f32, 1x8168, 1, r2, @0x2fee0, @0x1ff60
    vbrow f32, 1x8168, 1, r27, @0x27f00, @0x2fee0
    vdiv f32, 1x8168, 1, r27, @0x17fc0, @0x1ff60, @0x27f00
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x8168, 1, r2, b1_1, r6, 0, @0x17fc0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L61:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
