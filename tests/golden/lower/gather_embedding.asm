; fusion/gather_embedding.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_gather_add (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2,b3], workspace []
.kernel k_fused_gather_add aiv
.gm b0_1 i64 [] inout
.gm b1_0 f32 [] inout
.gm b2_2 f32 [] inout
.gm b3_3 f32 [] inout
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
.arg s11 0
.arg s12 0
.arg s13 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L71
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 12
    ldarg r6, 13
    ldarg r7, 14
    ldarg r8, 15
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
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    waitf mte3, mte2, 0
    ld i64, 1x1, 1, 1, @0x17ee0, b0_1, r5, 0
    ldg f32, 1x4084, 1, r2, @0x7fa0, b1_0, r6, 1, i64, @0x17ee0, 0, 8, 50
    ld f32, 1x4084, 1, r2, @0xff40, b2_2, r7, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast i64, 1x4084, 1, r2, @0x0, @0x17ee0
    vadd f32, 1x4084, 1, r27, @0x0, @0x7fa0, @0xff40
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4084, 1, r2, b3_3, r8, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L71
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 12
    ldarg r6, 13
    ldarg r7, 14
    ldarg r8, 15
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
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    waitf mte3, mte2, 1
    ld i64, 1x1, 1, 1, @0x2fea0, b0_1, r5, 0
    ldg f32, 1x4084, 1, r2, @0x1ff60, b1_0, r6, 1, i64, @0x2fea0, 0, 8, 50
    ld f32, 1x4084, 1, r2, @0x27f00, b2_2, r7, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast i64, 1x4084, 1, r2, @0x17fc0, @0x2fea0
    vadd f32, 1x4084, 1, r27, @0x17fc0, @0x1ff60, @0x27f00
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x4084, 1, r2, b3_3, r8, 0, @0x17fc0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L71:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
