; fusion/row_broadcast.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_sub_relu (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2], workspace []
.kernel k_fused_sub_relu aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.gm b2_2 f32 [] inout
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
.arg s8 0
.arg s9 0
.arg s10 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L63
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 10
    ldarg r6, 11
    ldarg r7, 12
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 0
    ld f32, 1x8176, 1, r2, @0x0, b0_0, r5, 0
    ld f32, 1x1, 1, 1, @0x17f60, b1_1, r6, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f32, 1x8176, 1, r2, @0x7fc0, @0x17f60
    vsub f32, 1x8176, 1, r27, @0xff80, @0x0, @0x7fc0
    vunary f32, 1x8176, 1, r27, @0x7fc0, @0xff80, relu
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x8176, 1, r2, b2_2, r7, 0, @0x7fc0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L63
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 10
    ldarg r6, 11
    ldarg r7, 12
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 1
    ld f32, 1x8176, 1, r2, @0x18000, b0_0, r5, 0
    ld f32, 1x1, 1, 1, @0x2ff60, b1_1, r6, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast f32, 1x8176, 1, r2, @0x1ffc0, @0x2ff60
    vsub f32, 1x8176, 1, r27, @0x27f80, @0x18000, @0x1ffc0
    vunary f32, 1x8176, 1, r27, @0x1ffc0, @0x27f80, relu
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x8176, 1, r2, b2_2, r7, 0, @0x1ffc0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L63:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
