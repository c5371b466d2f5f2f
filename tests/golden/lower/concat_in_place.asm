; fusion/concat_in_place.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_cat_exp (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_fused_cat_exp aiv
.gm b0_0 f32 [] inout
.gm b1_2 f32 [] inout
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
    bge r0, r1, L49
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
    ld f32, 1x12264, 1, r2, @0x0, b0_0, r5, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x12264, 1, r27, @0xbfa0, @0x0, exp
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x12264, 1, r2, b1_2, r6, 0, @0xbfa0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L49
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
    ld f32, 1x12264, 1, r2, @0x17fe0, b0_0, r5, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x12264, 1, r27, @0x23f80, @0x17fe0, exp
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x12264, 1, r2, b1_2, r6, 0, @0x23f80
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L49:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: cat (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_cat aiv
.gm b0_1 f32 [] inout
.gm b1_2 f32 [] inout
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
    bge r0, r1, L47
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
    ld f32, 1x24536, 1, r2, @0x0, b0_1, r5, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x24536, 1, r2, b1_2, r6, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L47
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
    ld f32, 1x24536, 1, r2, @0x18000, b0_1, r5, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x24536, 1, r2, b1_2, r6, 0, @0x18000
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L47:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 2: cat (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0], workspace []
.kernel k_cat aiv
.gm b0_2 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 4
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L5:
    bge r0, r1, L38
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vdup f32, 1x4096, 1, r2, @0x0, 0.0
    setf v, mte3, 0
    waitf v, mte3, 0
    ldarg r4, 3
    mul r4, r0, r4
    add r4, r4, r5
    ldarg r31, 3
    stx f32, 1x4096, 1, r2, b0_2, r4, 0, r31, @0x0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L38
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    setf mte2, v, 1
    waitf mte2, v, 1
    vdup f32, 1x4096, 1, r2, @0x4080, 0.0
    setf v, mte3, 1
    waitf v, mte3, 1
    ldarg r4, 3
    mul r4, r0, r4
    add r4, r4, r5
    ldarg r31, 3
    stx f32, 1x4096, 1, r2, b0_2, r4, 0, r31, @0x4080
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L5
L38:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 3: neg (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_neg aiv
.gm b0_2 f32 [] inout
.gm b1_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 5
    ldarg r6, 6
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L6:
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x0, b0_2, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vunary f32, 1x4096, 1, r2, @0x4000, @0x0, neg
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0x4000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L37
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x80a0, b0_2, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vunary f32, 1x4096, 1, r2, @0xc0a0, @0x80a0, neg
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L37:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
